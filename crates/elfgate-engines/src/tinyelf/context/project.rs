//! The project context block: the project's own instructions for agents, read from its root
//! through the firewall and capped in size.

use elfgate_tools::ExecutionFirewall;
use elfgate_tools::confined::read_capped;
use std::path::Path;

/// The files read, in this order, when they exist at the project's root.
pub(crate) const PROJECT_FILES: [&str; 2] = ["AGENTS.md", "ELFGATE.md"];

/// The block's text (None when no file exists) and notes about files that were cut or refused.
pub(crate) async fn project_context(
    firewall: &ExecutionFirewall,
    project: &Path,
    max_bytes: usize,
) -> (Option<String>, Vec<String>) {
    let mut parts = Vec::new();
    let mut notes = Vec::new();
    let mut left = max_bytes;
    for name in PROJECT_FILES {
        // symlink_metadata: a symlink is there too and the firewall judges where it leads.
        if std::fs::symlink_metadata(project.join(name)).is_err() {
            continue;
        }
        if left == 0 {
            notes.push(format!(
                "project context: {name} left out (project_context_max_bytes = {max_bytes} used up)"
            ));
            continue;
        }
        match read_capped(firewall, project, name, left).await {
            Ok(t) => {
                left = left.saturating_sub(t.text.len());
                let mut part = format!("Instructions from the project's {name}:\n{}", t.text);
                if t.truncated() {
                    let note = format!(
                        "{name} cut at {} of {} bytes (project_context_max_bytes)",
                        t.text.len(),
                        t.total_bytes
                    );
                    part.push_str(&format!("\n[... {note} ...]"));
                    notes.push(format!("project context: {note}"));
                }
                parts.push(part);
            }
            Err(e) => notes.push(format!("project context: {name} not read: {e}")),
        }
    }
    ((!parts.is_empty()).then(|| parts.join("\n\n")), notes)
}
