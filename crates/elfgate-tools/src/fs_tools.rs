//! File-system tools, all confined to the project: read_file, write_file, edit_file, list_dir, glob, grep.
//! Single files are opened through [`crate::file_access`]; directories are walked through
//! [`crate::walk`], which drops what the firewall refuses.

use crate::file_access::{self, Access};
use crate::tool::{
    BuiltinTool, FirewallTargets, PermissionTier, ToolContext, ToolDecl, ToolError, ToolKind,
    ToolOutput,
};
use crate::walk::{WalkOptions, walk};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use tokio::io::{AsyncSeekExt, AsyncWriteExt};

fn path_target(input: &Value, key: &str) -> FirewallTargets {
    FirewallTargets {
        paths: input
            .get(key)
            .and_then(Value::as_str)
            .map(|p| vec![p.to_string()])
            .unwrap_or_default(),
        command: None,
    }
}

/// The firewall target of a tool whose optional `path` defaults to the project root.
fn path_or_root_target(input: &Value) -> FirewallTargets {
    let mut t = path_target(input, "path");
    if t.paths.is_empty() {
        t.paths.push(".".into());
    }
    t
}

/// Largest file read_file reads (the loop's truncation applies after).
pub const READ_MAX_BYTES: u64 = 10 * 1024 * 1024;
/// Largest file edit_file loads: it holds the file and its edited copy in memory at once.
pub const EDIT_MAX_BYTES: u64 = 10 * 1024 * 1024;

/// The tool error for a file past a tool's size cap. `size` is the size the file system reports,
/// when that is what showed it (a file can also be found larger while being read).
fn too_large(tool: &str, shown: &str, size: Option<u64>, cap: u64) -> ToolOutput {
    let size = match size {
        Some(n) => format!("{n} bytes"),
        None => "longer than it said".to_string(),
    };
    ToolOutput::error(format!(
        "{shown} is {size}, more than {tool}'s limit of {cap} bytes; read a line range with grep first"
    ))
}

/// read_file: a file's text, optionally a line range.
#[derive(Debug, Default)]
pub struct ReadFile;

/// The tool's arguments (their JSON schema is the tool's; this comment is not in it).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// File path, relative to the project
    path: String,
    #[serde(default, alias = "startLine")]
    #[schemars(range(min = 1))]
    start_line: Option<usize>,
    #[serde(default, alias = "endLine")]
    #[schemars(range(min = 1))]
    end_line: Option<usize>,
}

/// read_file's schema, for other modules' tests.
#[cfg(test)]
pub(crate) fn read_schema_for_tests() -> Value {
    crate::schema::schema_of::<ReadArgs>()
}

#[async_trait]
impl BuiltinTool for ReadFile {
    type Args = ReadArgs;
    const DECL: ToolDecl = ToolDecl {
        name: "read_file",
        description: "Read a text file of the project. Optional 1-based inclusive line range start_line..end_line.",
        tier: PermissionTier::ReadOnly,
        kind: ToolKind::Read,
        works_in_project: true,
    };
    fn targets(&self, input: &Value) -> FirewallTargets {
        path_target(input, "path")
    }
    async fn run(&self, a: ReadArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let path = ctx.resolve(&a.path)?;
        let (file, meta) = file_access::open(&path, &a.path, Access::Read).await?;
        if meta.is_dir() {
            return Ok(ToolOutput::error(format!(
                "{} is a directory; use list_dir",
                a.path
            )));
        }
        if meta.len() > READ_MAX_BYTES {
            return Ok(too_large(
                "read_file",
                &a.path,
                Some(meta.len()),
                READ_MAX_BYTES,
            ));
        }
        let (bytes, more) = file_access::read_at_most(file, READ_MAX_BYTES).await?;
        if more {
            return Ok(too_large("read_file", &a.path, None, READ_MAX_BYTES));
        }
        let text = String::from_utf8_lossy(&bytes);
        if a.start_line.is_none() && a.end_line.is_none() {
            return Ok(ToolOutput::ok(text.into_owned()));
        }
        let start = a.start_line.unwrap_or(1).max(1);
        let end = a.end_line.unwrap_or(usize::MAX);
        if end < start {
            return Ok(ToolOutput::error(format!(
                "end_line {end} is before start_line {start}"
            )));
        }
        let lines: Vec<&str> = text.lines().collect();
        if start > lines.len() {
            return Ok(ToolOutput::error(format!(
                "start_line {start} is past the end of the file ({} lines)",
                lines.len()
            )));
        }
        let end = end.min(lines.len());
        let mut out = String::new();
        for (i, l) in lines[start - 1..end].iter().enumerate() {
            out.push_str(&format!("{}: {l}\n", start + i));
        }
        Ok(ToolOutput::ok(out))
    }
}

/// write_file: creates or overwrites a file (parent directories are created).
#[derive(Debug, Default)]
pub struct WriteFile;

/// The tool's arguments (their JSON schema is the tool's; this comment is not in it).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    path: String,
    content: String,
}

#[async_trait]
impl BuiltinTool for WriteFile {
    type Args = WriteArgs;
    const DECL: ToolDecl = ToolDecl {
        name: "write_file",
        description: "Create or overwrite a file of the project with the given content.",
        tier: PermissionTier::ConfirmOnce,
        kind: ToolKind::Edit,
        works_in_project: true,
    };
    fn targets(&self, input: &Value) -> FirewallTargets {
        path_target(input, "path")
    }
    async fn run(&self, a: WriteArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let path = ctx.resolve(&a.path)?;
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent).await?;
        }
        let (mut file, _) = file_access::open(&path, &a.path, Access::Create).await?;
        replace_contents(&mut file, a.content.as_bytes()).await?;
        Ok(ToolOutput::ok(format!(
            "wrote {} bytes to {}",
            a.content.len(),
            a.path
        )))
    }
}

/// Replaces everything in `file` (opened for writing) with `bytes`.
pub(crate) async fn replace_contents(
    file: &mut tokio::fs::File,
    bytes: &[u8],
) -> std::io::Result<()> {
    file.set_len(0).await?;
    file.rewind().await?;
    file.write_all(bytes).await?;
    file.flush().await
}

/// Why an exact replacement cannot be made; the message tells the model what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplaceError {
    /// Nothing to look for.
    #[error("old_string must not be empty")]
    EmptyOld,
    /// The text does not occur.
    #[error(
        "old_string was not found in the file; read the file and copy the exact text (whitespace included)"
    )]
    NotFound,
    /// The text occurs more than once.
    #[error(
        "old_string matches {0} places; include more surrounding text so that it matches exactly once"
    )]
    Ambiguous(usize),
}

/// The result of an exact replacement.
pub fn replace_exact(text: &str, old: &str, new: &str) -> Result<String, ReplaceError> {
    if old.is_empty() {
        return Err(ReplaceError::EmptyOld);
    }
    match text.matches(old).count() {
        0 => Err(ReplaceError::NotFound),
        1 => Ok(text.replacen(old, new, 1)),
        n => Err(ReplaceError::Ambiguous(n)),
    }
}

/// edit_file: replaces one exact occurrence of a string.
#[derive(Debug, Default)]
pub struct EditFile;

/// The tool's arguments (their JSON schema is the tool's; this comment is not in it).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    path: String,
    #[serde(alias = "oldString")]
    old_string: String,
    #[serde(alias = "newString")]
    new_string: String,
}

#[async_trait]
impl BuiltinTool for EditFile {
    type Args = EditArgs;
    const DECL: ToolDecl = ToolDecl {
        name: "edit_file",
        description: "Replace exactly one occurrence of old_string with new_string in a file. Fails if old_string is missing or matches more than once.",
        tier: PermissionTier::ConfirmOnce,
        kind: ToolKind::Edit,
        works_in_project: true,
    };
    fn targets(&self, input: &Value) -> FirewallTargets {
        path_target(input, "path")
    }
    async fn run(&self, a: EditArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let path = ctx.resolve(&a.path)?;
        let (mut file, meta) = file_access::open(&path, &a.path, Access::Update).await?;
        if meta.len() > EDIT_MAX_BYTES {
            return Ok(too_large(
                "edit_file",
                &a.path,
                Some(meta.len()),
                EDIT_MAX_BYTES,
            ));
        }
        // A clone of the handle reads, so that the same one can rewrite the file after.
        let reader = file.try_clone().await?;
        let (bytes, more) = file_access::read_at_most(reader, EDIT_MAX_BYTES).await?;
        if more {
            return Ok(too_large("edit_file", &a.path, None, EDIT_MAX_BYTES));
        }
        let text = String::from_utf8(bytes)
            .map_err(|_| ToolError::Failed(format!("{} is not valid UTF-8 text", a.path)))?;
        match replace_exact(&text, &a.old_string, &a.new_string) {
            Ok(new_text) => {
                replace_contents(&mut file, new_text.as_bytes()).await?;
                Ok(ToolOutput::ok(format!("edited {}", a.path)))
            }
            Err(msg) => Ok(ToolOutput::error(format!("{}: {msg}", a.path))),
        }
    }
}

/// list_dir: the entries of a directory.
#[derive(Debug, Default)]
pub struct ListDir;

/// The tool's arguments (their JSON schema is the tool's; this comment is not in it).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    #[serde(default)]
    path: Option<String>,
}

#[async_trait]
impl BuiltinTool for ListDir {
    type Args = ListArgs;
    const DECL: ToolDecl = ToolDecl {
        name: "list_dir",
        description: "List a directory of the project (default: the project root). Directories end with '/'.",
        tier: PermissionTier::ReadOnly,
        kind: ToolKind::Read,
        works_in_project: true,
    };
    fn targets(&self, input: &Value) -> FirewallTargets {
        path_or_root_target(input)
    }
    async fn run(&self, a: ListArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let shown = a.path.as_deref().unwrap_or(".");
        let path = ctx.resolve(shown)?;
        if !tokio::fs::metadata(&path).await?.is_dir() {
            return Ok(ToolOutput::error(format!(
                "{shown} is not a directory; use read_file"
            )));
        }
        let confinement = ctx.firewall.confinement(&ctx.project_path)?;
        let names = tokio::task::spawn_blocking(move || {
            let opts = WalkOptions {
                max_depth: 1,
                skip_bulky: false,
            };
            let mut names: Vec<String> = walk(&path, confinement, opts)
                .filter(|e| e.depth() == 1)
                .map(|e| {
                    let mut n = e.file_name().to_string_lossy().into_owned();
                    if e.file_type().is_dir() {
                        n.push('/');
                    }
                    n
                })
                .collect();
            names.sort();
            names
        })
        .await
        .map_err(|e| ToolError::Failed(e.to_string()))?;
        Ok(ToolOutput::ok(names.join("\n")))
    }
}

/// Most matches glob and grep return.
const MAX_MATCHES: usize = 1000;
/// Most files grep reads.
const MAX_FILES: usize = 20_000;
/// Largest file grep reads.
const GREP_MAX_FILE_BYTES: u64 = 2 * 1024 * 1024;

/// How grep and glob walk: the whole tree, without the bulky generated directories.
const SEARCH_WALK: WalkOptions = WalkOptions {
    max_depth: usize::MAX,
    skip_bulky: true,
};

/// A file's bytes for grep; None (skipped without a word, like the entries the walker drops) when
/// it is too large, unreadable, or refused by the firewall (several hard links).
fn read_for_grep(path: &std::path::Path) -> Option<Vec<u8>> {
    let (file, meta) = file_access::open_blocking(path, Access::Read).ok()?;
    if !meta.is_file() || meta.len() > GREP_MAX_FILE_BYTES {
        return None;
    }
    let (bytes, more) = file_access::read_at_most_blocking(file, GREP_MAX_FILE_BYTES).ok()?;
    (!more).then_some(bytes)
}

/// A search's answer: its hits (run on a blocking thread), "no matches", or the run's interrupt.
fn search_output(
    hits: Result<String, tokio::task::JoinError>,
    ctx: &ToolContext,
) -> Result<ToolOutput, ToolError> {
    let hits = hits.map_err(|e| ToolError::Failed(e.to_string()))?;
    if ctx.cancel.is_cancelled() {
        return Err(ToolError::Interrupted);
    }
    Ok(ToolOutput::ok(if hits.is_empty() {
        "no matches".to_string()
    } else {
        hits
    }))
}

/// glob: project files matching a pattern.
#[derive(Debug, Default)]
pub struct Glob;

/// The tool's arguments (their JSON schema is the tool's; this comment is not in it).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
}

#[async_trait]
impl BuiltinTool for Glob {
    type Args = GlobArgs;
    const DECL: ToolDecl = ToolDecl {
        name: "glob",
        description: "Find project files whose path (relative to `path`, default the project root) matches a glob such as **/*.rs.",
        tier: PermissionTier::ReadOnly,
        kind: ToolKind::Read,
        works_in_project: true,
    };
    fn targets(&self, input: &Value) -> FirewallTargets {
        path_or_root_target(input)
    }
    async fn run(&self, a: GlobArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let root = ctx.resolve(a.path.as_deref().unwrap_or("."))?;
        let confinement = ctx.firewall.confinement(&ctx.project_path)?;
        let matcher = globset::Glob::new(&a.pattern)
            .map_err(|e| ToolError::InvalidInput(format!("bad glob: {e}")))?
            .compile_matcher();
        let cancel = ctx.cancel.clone();
        let out = tokio::task::spawn_blocking(move || {
            let mut hits = Vec::new();
            let mut more = false;
            for e in walk(&root, confinement, SEARCH_WALK) {
                if cancel.is_cancelled() {
                    break;
                }
                let Ok(rel) = e.path().strip_prefix(&root) else {
                    continue;
                };
                if e.depth() > 0 && matcher.is_match(rel) {
                    if hits.len() >= MAX_MATCHES {
                        more = true;
                        break;
                    }
                    hits.push(rel.display().to_string());
                }
            }
            hits.sort();
            if more {
                hits.push(format!(
                    "[... more than {MAX_MATCHES} matches; narrow the pattern]"
                ));
            }
            hits.join("\n")
        })
        .await;
        search_output(out, ctx)
    }
}

/// grep: lines matching a regex in project files.
#[derive(Debug, Default)]
pub struct Grep;

/// The tool's arguments (their JSON schema is the tool's; this comment is not in it).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    glob: Option<String>,
    #[serde(default, alias = "caseInsensitive")]
    case_insensitive: bool,
    #[serde(default, alias = "maxResults")]
    #[schemars(range(min = 1))]
    max_results: Option<usize>,
}

#[async_trait]
impl BuiltinTool for Grep {
    type Args = GrepArgs;
    const DECL: ToolDecl = ToolDecl {
        name: "grep",
        description: "Search project files for a regular expression; returns path:line: text. Optional path (file or directory), glob filter, case_insensitive, max_results (default and limit 1000).",
        tier: PermissionTier::ReadOnly,
        kind: ToolKind::Read,
        works_in_project: true,
    };
    fn targets(&self, input: &Value) -> FirewallTargets {
        path_or_root_target(input)
    }
    async fn run(&self, a: GrepArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let root = ctx.resolve(a.path.as_deref().unwrap_or("."))?;
        let re = regex::RegexBuilder::new(&a.pattern)
            .case_insensitive(a.case_insensitive)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| ToolError::InvalidInput(format!("bad regex: {e}")))?;
        let filter = match &a.glob {
            Some(g) => Some(
                globset::Glob::new(g)
                    .map_err(|e| ToolError::InvalidInput(format!("bad glob: {e}")))?
                    .compile_matcher(),
            ),
            None => None,
        };
        let limit = a.max_results.unwrap_or(MAX_MATCHES).clamp(1, MAX_MATCHES);
        let cancel = ctx.cancel.clone();
        let confinement = ctx.firewall.confinement(&ctx.project_path)?;
        let base = confinement.project().to_path_buf();
        let out = tokio::task::spawn_blocking(move || {
            let mut hits = Vec::new();
            let mut files = 0usize;
            let mut more = false;
            'files: for e in walk(&root, confinement, SEARCH_WALK) {
                if cancel.is_cancelled() {
                    break;
                }
                if !e.file_type().is_file() {
                    continue;
                }
                let rel = e.path().strip_prefix(&base).unwrap_or(e.path());
                if let Some(f) = &filter
                    && !f.is_match(rel)
                    && !f.is_match(e.file_name())
                {
                    continue;
                }
                files += 1;
                if files > MAX_FILES {
                    more = true;
                    break;
                }
                let Some(bytes) = read_for_grep(e.path()) else {
                    continue;
                };
                if bytes.contains(&0) {
                    continue; // binary
                }
                let text = String::from_utf8_lossy(&bytes);
                for (i, line) in text.lines().enumerate() {
                    if re.is_match(line) {
                        if hits.len() >= limit {
                            more = true;
                            break 'files;
                        }
                        let line: String = line.chars().take(500).collect();
                        hits.push(format!("{}:{}: {line}", rel.display(), i + 1));
                    }
                }
            }
            if more {
                hits.push(format!(
                    "[... results limited to {limit} matches / {MAX_FILES} files]"
                ));
            }
            hits.join("\n")
        })
        .await;
        search_output(out, ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_replacement_needs_exactly_one_match() {
        assert_eq!(replace_exact("a b c", "b", "x").unwrap(), "a x c");
        let e = replace_exact("a b c", "z", "x").unwrap_err();
        assert_eq!(e, ReplaceError::NotFound);
        assert!(e.to_string().contains("not found"));
        let e = replace_exact("b b", "b", "x").unwrap_err();
        assert!(e.to_string().contains("matches 2 places"));
        assert_eq!(replace_exact("abc", "", "x"), Err(ReplaceError::EmptyOld));
        // Replacement text containing the old text is fine.
        assert_eq!(replace_exact("ab", "a", "aa").unwrap(), "aab");
    }
}
