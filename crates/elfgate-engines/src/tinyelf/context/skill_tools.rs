//! The tools that open skills: `load_skill` returns a skill's instructions (the note the model
//! reads from then on; the system prompt is not rebuilt), `read_skill_file` one of its files,
//! resolved by the firewall inside the skill's folder.

use super::skills::{SKILL_FILE, Skill, SkillSet};
use async_trait::async_trait;
use elfgate_tools::confined::read_capped;
use elfgate_tools::{
    BuiltinTool, PermissionTier, ToolContext, ToolDecl, ToolError, ToolKind, ToolOutput,
    ToolRegistry,
};
use schemars::JsonSchema;
use serde::Deserialize;
use std::sync::Arc;

/// The name of the tool that loads a skill.
pub(crate) const LOAD_SKILL: &str = "load_skill";
/// The name of the tool that reads a skill's file.
pub(crate) const READ_SKILL_FILE: &str = "read_skill_file";
/// Largest skill file read at once.
const SKILL_FILE_READ_MAX: usize = 1024 * 1024;

/// `tools` with the skill tools added when there are skills and `enabled` says which of the two
/// the run offers.
pub(crate) fn with_skill_tools(
    mut tools: ToolRegistry,
    skills: &Arc<SkillSet>,
    enabled: impl Fn(&str) -> bool,
) -> ToolRegistry {
    if skills.skills.is_empty() {
        return tools;
    }
    if enabled(LOAD_SKILL) {
        tools.register(Arc::new(LoadSkill(skills.clone())));
    }
    if enabled(READ_SKILL_FILE) {
        tools.register(Arc::new(ReadSkillFile(skills.clone())));
    }
    tools
}

/// Loads a skill's instructions.
struct LoadSkill(Arc<SkillSet>);

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadArgs {
    /// The skill's name, as in the catalogue
    name: String,
}

fn unknown(set: &SkillSet, name: &str) -> ToolOutput {
    let names: Vec<&str> = set.skills.iter().map(|s| s.name.as_str()).collect();
    ToolOutput::error(format!(
        "no skill named '{name}'; the skills are: {}",
        names.join(", ")
    ))
}

#[async_trait]
impl BuiltinTool for LoadSkill {
    type Args = LoadArgs;
    const DECL: ToolDecl = ToolDecl {
        name: LOAD_SKILL,
        description: "Load a skill from the catalogue: returns its instructions and lists its other files.",
        tier: PermissionTier::ReadOnly,
        kind: ToolKind::Read,
        works_in_project: false,
    };
    async fn run(&self, a: LoadArgs, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let Some(skill) = self.0.get(&a.name) else {
            return Ok(unknown(&self.0, &a.name));
        };
        Ok(ToolOutput::ok(skill_note(skill)))
    }
}

/// What the model reads of a loaded skill: its instructions and the list of its other files (the
/// same whether the model loads it or the router activates it).
pub(crate) fn skill_note(skill: &Skill) -> String {
    let mut files = Vec::new();
    list_files(&skill.path, &skill.path, &mut files);
    files.sort();
    let mut out = format!("[Skill \"{}\" loaded]\n{}", skill.name, skill.instructions);
    if !files.is_empty() {
        out.push_str(&format!(
            "\n\n[Files of this skill, for read_skill_file: {}]",
            files.join(", ")
        ));
    }
    out
}

/// The regular files under `dir` (SKILL.md aside), relative to `root`; symlinks are not
/// followed, and at most 200 are listed.
fn list_files(root: &std::path::Path, dir: &std::path::Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        if out.len() >= 200 {
            return;
        }
        let Ok(t) = e.file_type() else { continue };
        let path = e.path();
        if t.is_dir() {
            list_files(root, &path, out);
        } else if t.is_file()
            && let Ok(rel) = path.strip_prefix(root)
            && rel != std::path::Path::new(SKILL_FILE)
        {
            out.push(rel.display().to_string());
        }
    }
}

/// Reads a file of a skill.
struct ReadSkillFile(Arc<SkillSet>);

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// The skill's name, as in the catalogue
    name: String,
    /// The file's path, relative to the skill's folder
    path: String,
}

#[async_trait]
impl BuiltinTool for ReadSkillFile {
    type Args = ReadArgs;
    const DECL: ToolDecl = ToolDecl {
        name: READ_SKILL_FILE,
        description: "Read a file of a skill (a path relative to the skill's folder, as load_skill lists them).",
        tier: PermissionTier::ReadOnly,
        kind: ToolKind::Read,
        works_in_project: false,
    };
    async fn run(&self, a: ReadArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let Some(skill) = self.0.get(&a.name) else {
            return Ok(unknown(&self.0, &a.name));
        };
        // The skill's folder is the root here: the firewall refuses anything outside it (and the
        // deny zones), symlinks followed.
        let file = read_capped(&ctx.firewall, &skill.path, &a.path, SKILL_FILE_READ_MAX).await?;
        let mut text = file.text.clone();
        if file.truncated() {
            text.push_str(&format!(
                "\n[... cut at {} of {} bytes ...]",
                file.text.len(),
                file.total_bytes
            ));
        }
        Ok(ToolOutput::ok(text))
    }
}
