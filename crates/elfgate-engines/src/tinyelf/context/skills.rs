//! Skills: folders holding a SKILL.md (front matter `name` and `description`, then instructions)
//! and optional files. They are found in the configured `skills_dirs` and in the project's
//! `.elfgate/skills`; the model sees their catalogue in the stable prefix and loads one with a
//! tool. A folder that is not a valid skill is reported with the reason, never fatal.

use elfgate_tools::ExecutionFirewall;
use elfgate_tools::confined::read_capped;
use serde::Serialize;
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
    /// The instructions after the front matter.
    #[serde(skip)]
    pub instructions: String,
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
    /// A front matter line of another shape.
    #[error("front matter line is not 'key: value': {0:?}")]
    NotKeyValue(String),
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
    let (name, description, instructions) = parse(&file.text)?;
    Ok(Skill {
        name,
        description,
        path: dir.to_path_buf(),
        source,
        instructions,
    })
}

/// Splits a SKILL.md into its front matter's `name` and `description` and the instructions.
/// The front matter is the block between a first line `---` and the next `---` line, of
/// `key: value` lines (values may be quoted; other keys are ignored).
pub(crate) fn parse(text: &str) -> Result<(String, String, String), SkillInvalid> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    if lines.next().map(str::trim_end) != Some("---") {
        return Err(SkillInvalid::NoFrontMatter);
    }
    let mut name = None;
    let mut description = None;
    let mut consumed = text.find('\n').map_or(text.len(), |i| i + 1);
    let mut closed = false;
    for line in lines {
        consumed += line.len();
        let l = line.trim_end();
        if l == "---" {
            closed = true;
            break;
        }
        if l.trim().is_empty() || l.trim_start().starts_with('#') {
            continue;
        }
        let Some((k, v)) = l.split_once(':') else {
            return Err(SkillInvalid::NotKeyValue(l.to_string()));
        };
        let v = unquote(v.trim());
        match k.trim() {
            "name" => name = Some(v),
            "description" => description = Some(v),
            _ => {}
        }
    }
    if !closed {
        return Err(SkillInvalid::Unclosed);
    }
    let name = name.filter(|n| !n.is_empty()).ok_or(SkillInvalid::NoName)?;
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    {
        return Err(SkillInvalid::BadName(name));
    }
    let description = description
        .filter(|d| !d.is_empty())
        .ok_or(SkillInvalid::NoDescription)?;
    let description: String = description.chars().take(DESCRIPTION_MAX_CHARS).collect();
    let instructions = text[consumed.min(text.len())..].trim().to_string();
    Ok((name, description, instructions))
}

fn unquote(v: &str) -> String {
    for q in ['"', '\''] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            return v[1..v.len() - 1].to_string();
        }
    }
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter() {
        let (n, d, i) =
            parse("---\nname: pdf\ndescription: \"Fill PDF forms\"\nlicense: x\n---\n\nStep 1.\n")
                .unwrap();
        assert_eq!(
            (n.as_str(), d.as_str(), i.as_str()),
            ("pdf", "Fill PDF forms", "Step 1.")
        );
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
                .contains("key: value")
        );
    }
}
