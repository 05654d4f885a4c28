//! Skills: folders holding a SKILL.md (YAML front matter: `name`, `description`, optional
//! `triggers` and `tools`; then instructions) and optional files. They are found in the configured
//! `skills_dirs` and in the project's `.elfgate/skills`; the model sees their catalogue in the
//! stable prefix and loads one with a tool, and the router (router.rs) activates those whose
//! triggers a prompt meets. A folder that is not a valid skill is reported with the reason, never
//! fatal.

use elfgate_tools::ExecutionFirewall;
use elfgate_tools::confined::read_capped;
use globset::Glob;
use regex::Regex;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The file that makes a folder a skill.
pub const SKILL_FILE: &str = "SKILL.md";
/// Where a project keeps its skills, under its root.
pub const PROJECT_SKILLS_DIR: &str = ".elfgate/skills";
/// Largest SKILL.md read.
const SKILL_FILE_MAX_BYTES: usize = 256 * 1024;
/// Longest description kept in the catalogue.
const DESCRIPTION_MAX_CHARS: usize = 1024;

/// Where a skill comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SkillSource {
    /// A folder of `skills_dirs` in the daemon's configuration.
    Config,
    /// The project's `.elfgate/skills`.
    Project,
}

/// A skill found on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Skill {
    /// Its name (front matter `name`).
    pub name: String,
    /// What it is for (front matter `description`).
    pub description: String,
    /// Its folder.
    #[schema(value_type = String)]
    pub path: PathBuf,
    /// Where it comes from.
    pub source: SkillSource,
    /// What makes the router activate it (front matter `triggers`; empty: only the model loads
    /// it).
    pub triggers: Triggers,
    /// The tools it needs (front matter `tools`, or `allowed-tools`); while it is active the
    /// model is offered only these (and the other active skills' ones) of the session's tools.
    /// None: it narrows nothing.
    pub tools: Option<Vec<String>>,
    /// The instructions after the front matter.
    #[serde(skip)]
    pub instructions: String,
}

/// A skill's triggers: the axes the router scores a prompt on (router.rs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Triggers {
    /// Words or phrases: each one the prompt holds (case aside, as whole words) scores 1.
    pub keywords: Vec<String>,
    /// Regular expressions: each one that matches the prompt scores 2.
    pub patterns: Vec<String>,
    /// File globs (`*.pdf`, `docs/**/*.md`): each one that a path named in the prompt matches
    /// scores 2.
    pub files: Vec<String>,
}

impl Triggers {
    /// Whether the skill has no trigger at all.
    pub fn is_empty(&self) -> bool {
        self.keywords.is_empty() && self.patterns.is_empty() && self.files.is_empty()
    }
}

/// A folder that looked like a skill but is not usable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SkillProblem {
    /// The folder.
    #[schema(value_type = String)]
    pub path: PathBuf,
    /// Why it was left out.
    pub reason: String,
}

/// Why a folder is not a usable skill.
#[derive(Debug, thiserror::Error)]
pub enum SkillInvalid {
    /// The folder holds no SKILL.md.
    #[error("no {SKILL_FILE}")]
    NoSkillFile,
    /// SKILL.md could not be read.
    #[error("{SKILL_FILE} not read: {0}")]
    Unreadable(String),
    /// SKILL.md is larger than the cap.
    #[error("{SKILL_FILE} is {0} bytes, more than {SKILL_FILE_MAX_BYTES}")]
    TooLarge(u64),
    /// The file does not start with a front matter block.
    #[error("SKILL.md does not start with front matter (a '---' line)")]
    NoFrontMatter,
    /// The front matter has no closing line.
    #[error("the front matter is not closed by a '---' line")]
    Unclosed,
    /// The front matter is not a YAML mapping of `key: value`.
    #[error("the front matter is not YAML 'key: value' lines: {0}")]
    NotKeyValue(String),
    /// A trigger pattern or file glob that does not compile.
    #[error("triggers.{field}: {value:?} is not valid: {why}")]
    BadTrigger {
        /// `patterns` or `files`.
        field: &'static str,
        /// The pattern or glob.
        value: String,
        /// Why.
        why: String,
    },
    /// No name.
    #[error("the front matter has no name")]
    NoName,
    /// A name with characters a tool argument should not carry.
    #[error("the name {0:?} may hold only letters, digits, '-', '_' and '.'")]
    BadName(String),
    /// No description.
    #[error("the front matter has no description")]
    NoDescription,
}

/// The skills available to a session, in catalogue order (by name), and the folders left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SkillSet {
    /// Usable skills.
    pub skills: Vec<Skill>,
    /// Folders that are not usable skills, with the reason.
    pub problems: Vec<SkillProblem>,
}

impl SkillSet {
    /// The skill named `name`.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }

    /// The catalogue block of the system prompt (None without skills). It depends only on the
    /// skills' names and descriptions, sorted, so it is the same for every run that finds the
    /// same skills.
    pub(crate) fn catalogue(&self) -> Option<String> {
        if self.skills.is_empty() {
            return None;
        }
        let mut out = String::from(
            "Skills: folders of instructions for particular tasks. Before a task one of them \
covers, call load_skill with its name to read its instructions; read_skill_file reads the other \
files a skill mentions.",
        );
        for s in &self.skills {
            out.push_str(&format!("\n- {}: {}", s.name, s.description));
        }
        Some(out)
    }
}

/// Finds the skills of the configured folders and of the project (when given). A name found twice
/// keeps its first folder (configured folders first, in order); the others are reported.
pub async fn discover(
    firewall: &ExecutionFirewall,
    skills_dirs: &[String],
    project: Option<&Path>,
) -> SkillSet {
    let mut roots: Vec<(PathBuf, SkillSource)> = skills_dirs
        .iter()
        .map(|d| (PathBuf::from(d), SkillSource::Config))
        .collect();
    if let Some(p) = project {
        roots.push((p.join(PROJECT_SKILLS_DIR), SkillSource::Project));
    }
    let mut set = SkillSet::default();
    for (root, source) in roots {
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
        dirs.sort();
        for dir in dirs {
            match load(firewall, &dir, source).await {
                Ok(skill) => match set.get(&skill.name) {
                    Some(first) => set.problems.push(SkillProblem {
                        reason: format!(
                            "the name '{}' is already taken by {}",
                            skill.name,
                            first.path.display()
                        ),
                        path: dir,
                    }),
                    None => set.skills.push(skill),
                },
                Err(why) => set.problems.push(SkillProblem {
                    path: dir,
                    reason: why.to_string(),
                }),
            }
        }
    }
    set.skills.sort_by(|a, b| a.name.cmp(&b.name));
    set
}

/// Reads one skill folder.
async fn load(
    firewall: &ExecutionFirewall,
    dir: &Path,
    source: SkillSource,
) -> Result<Skill, SkillInvalid> {
    if std::fs::symlink_metadata(dir.join(SKILL_FILE)).is_err() {
        return Err(SkillInvalid::NoSkillFile);
    }
    let file = read_capped(firewall, dir, SKILL_FILE, SKILL_FILE_MAX_BYTES)
        .await
        .map_err(|e| SkillInvalid::Unreadable(e.to_string()))?;
    if file.truncated() {
        return Err(SkillInvalid::TooLarge(file.total_bytes));
    }
    let parsed = parse(&file.text)?;
    Ok(Skill {
        name: parsed.name,
        description: parsed.description,
        path: dir.to_path_buf(),
        source,
        triggers: parsed.triggers,
        tools: parsed.tools,
        instructions: parsed.instructions,
    })
}

/// A SKILL.md taken apart.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub name: String,
    pub description: String,
    pub triggers: Triggers,
    pub tools: Option<Vec<String>>,
    pub instructions: String,
}

/// The front matter's keys the daemon reads; others (`license`, `metadata`, …) are ignored.
#[derive(Deserialize)]
struct FrontMatter {
    name: Option<String>,
    description: Option<String>,
    #[serde(default)]
    triggers: Option<TriggerSpec>,
    #[serde(default)]
    tools: Option<ToolList>,
    /// Agent Skills' own name for the tools a skill uses.
    #[serde(default, rename = "allowed-tools")]
    allowed_tools: Option<ToolList>,
}

/// `triggers:` as a list (keywords) or a mapping of the axes.
#[derive(Deserialize)]
#[serde(untagged)]
enum TriggerSpec {
    Keywords(Vec<String>),
    Axes(Triggers),
}

/// `tools:` as a list, or one string of names separated by commas or spaces.
#[derive(Deserialize)]
#[serde(untagged)]
enum ToolList {
    List(Vec<String>),
    Text(String),
}

impl ToolList {
    fn names(self) -> Vec<String> {
        match self {
            ToolList::List(v) => v,
            ToolList::Text(t) => t
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|n| !n.is_empty())
                .map(str::to_string)
                .collect(),
        }
    }
}

/// Splits a SKILL.md into its front matter and the instructions. The front matter is the YAML
/// block between a first line `---` and the next `---` line.
pub(crate) fn parse(text: &str) -> Result<Parsed, SkillInvalid> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    if lines.next().map(str::trim_end) != Some("---") {
        return Err(SkillInvalid::NoFrontMatter);
    }
    let start = text.find('\n').map_or(text.len(), |i| i + 1);
    let mut consumed = start;
    let mut yaml_end = None;
    for line in lines {
        if line.trim_end() == "---" {
            yaml_end = Some(consumed);
            consumed += line.len();
            break;
        }
        consumed += line.len();
    }
    let yaml_end = yaml_end.ok_or(SkillInvalid::Unclosed)?;
    let yaml = &text[start..yaml_end];
    let front: FrontMatter = if yaml.trim().is_empty() {
        FrontMatter {
            name: None,
            description: None,
            triggers: None,
            tools: None,
            allowed_tools: None,
        }
    } else {
        serde_yaml_ng::from_str(yaml).map_err(|e| SkillInvalid::NotKeyValue(e.to_string()))?
    };
    let name = front
        .name
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .ok_or(SkillInvalid::NoName)?;
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    {
        return Err(SkillInvalid::BadName(name));
    }
    let description = front
        .description
        .map(|d| d.trim().to_string())
        .filter(|d| !d.is_empty())
        .ok_or(SkillInvalid::NoDescription)?;
    let description: String = description.chars().take(DESCRIPTION_MAX_CHARS).collect();
    let triggers = match front.triggers {
        None => Triggers::default(),
        Some(TriggerSpec::Keywords(keywords)) => Triggers {
            keywords,
            ..Default::default()
        },
        Some(TriggerSpec::Axes(t)) => t,
    };
    check_triggers(&triggers)?;
    let tools = front.tools.or(front.allowed_tools).map(ToolList::names);
    let instructions = text[consumed.min(text.len())..].trim().to_string();
    Ok(Parsed {
        name,
        description,
        triggers,
        tools,
        instructions,
    })
}

/// Refuses triggers whose patterns or globs do not compile (the skill is left out, saying why).
fn check_triggers(t: &Triggers) -> Result<(), SkillInvalid> {
    for p in &t.patterns {
        Regex::new(p).map_err(|e| SkillInvalid::BadTrigger {
            field: "patterns",
            value: p.clone(),
            why: e.to_string(),
        })?;
    }
    for f in &t.files {
        Glob::new(f).map_err(|e| SkillInvalid::BadTrigger {
            field: "files",
            value: f.clone(),
            why: e.to_string(),
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter() {
        let p =
            parse("---\nname: pdf\ndescription: \"Fill PDF forms\"\nlicense: x\n---\n\nStep 1.\n")
                .unwrap();
        assert_eq!(
            (
                p.name.as_str(),
                p.description.as_str(),
                p.instructions.as_str()
            ),
            ("pdf", "Fill PDF forms", "Step 1.")
        );
        assert!(p.triggers.is_empty() && p.tools.is_none());
        // Triggers as a list (keywords) or as axes; tools as a list or Agent Skills' string.
        let p = parse("---\nname: a\ndescription: d\ntriggers: [pdf, fill form]\nallowed-tools: read_file, glob\n---\n").unwrap();
        assert_eq!(p.triggers.keywords, ["pdf", "fill form"]);
        assert_eq!(p.tools.unwrap(), ["read_file", "glob"]);
        let p = parse("---\nname: a\ndescription: d\ntriggers:\n  keywords: [deploy]\n  patterns: ['v\\d+']\n  files: ['*.pdf']\ntools:\n  - bash\n---\n").unwrap();
        assert_eq!(p.triggers.patterns, ["v\\d+"]);
        assert_eq!(p.triggers.files, ["*.pdf"]);
        assert_eq!(p.tools.unwrap(), ["bash"]);
        assert!(
            parse("---\nname: a\ndescription: d\ntriggers:\n  patterns: ['(']\n---\n")
                .unwrap_err()
                .to_string()
                .contains("triggers.patterns")
        );
        assert!(parse("---\nname: a\ndescription: d\ntriggers:\n  colors: [red]\n---\n").is_err());
        assert!(
            parse("no front matter")
                .unwrap_err()
                .to_string()
                .contains("front matter")
        );
        assert!(
            parse("---\nname: a\n")
                .unwrap_err()
                .to_string()
                .contains("not closed")
        );
        assert!(
            parse("---\ndescription: d\n---\n")
                .unwrap_err()
                .to_string()
                .contains("no name")
        );
        assert!(
            parse("---\nname: a\n---\n")
                .unwrap_err()
                .to_string()
                .contains("no description")
        );
        assert!(
            parse("---\nname: a b\ndescription: d\n---\n")
                .unwrap_err()
                .to_string()
                .contains("may hold only")
        );
        assert!(
            parse("---\njunk\n---\n")
                .unwrap_err()
                .to_string()
                .contains("'key: value'")
        );
    }
}
