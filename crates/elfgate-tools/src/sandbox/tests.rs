//! Processes confined by the host's bubblewrap (the project's install script installs it; these
//! tests fail where it does not run, rather than pass without confining anything).

use super::*;
use crate::process::{ChildSetup, End, Isolation, run};
use std::path::Path;
use tokio_util::sync::CancellationToken;

async fn bubblewrap(config: &SandboxConfig, deny: Vec<PathBuf>) -> Arc<Sandbox> {
    let sandbox = Sandbox::detect(config, deny).await;
    assert!(
        sandbox.mechanism().is_ok(),
        "bwrap does not run here: {:?}",
        sandbox.mechanism()
    );
    Arc::new(sandbox)
}

/// `line` with bash in `project`, confined; returns (exit code, stdout + stderr).
async fn confined(sandbox: &Arc<Sandbox>, project: &Path, line: &str) -> (Option<i32>, String) {
    let setup = ChildSetup {
        sandbox: Some(sandbox.clone()),
        isolation: Isolation::probe().await.ok(),
        ..ChildSetup::default()
    };
    let out = run(
        &setup.spec("bash", &["-c", line], project),
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    let code = match out.end {
        End::Exited(s) => s.code(),
        End::TimedOut | End::Cancelled => None,
    };
    let text = String::from_utf8_lossy(&out.stdout.bytes).into_owned()
        + &String::from_utf8_lossy(&out.stderr.bytes);
    (code, text)
}

/// A base directory outside /tmp, so that hiding is the deny zones' doing and not the private
/// /tmp's.
fn base() -> tempfile::TempDir {
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/sandbox-tests");
    std::fs::create_dir_all(&target).unwrap();
    tempfile::tempdir_in(target).unwrap()
}

#[tokio::test]
async fn a_confined_command_writes_only_in_its_project_and_sees_no_deny_zone() {
    let dir = base();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let (project, outside, secrets) = (root.join("p"), root.join("outside"), root.join("keys"));
    for d in [&project, &outside, &secrets] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(secrets.join("id_rsa"), "PRIVATE-KEY-7731").unwrap();
    std::fs::write(root.join("token"), "TOKEN-7731").unwrap();
    let sandbox = bubblewrap(
        &SandboxConfig::default(),
        vec![secrets.clone(), root.join("token")],
    )
    .await;
    let line = format!(
        "cat {k}/id_rsa; cat {r}/token; ls {k}; echo in > inside.txt; echo out > {o}/x; \
         echo t > /tmp/t && cat /tmp/t; echo procs=$(ls /proc | grep -c '^[0-9]')",
        k = secrets.display(),
        r = root.display(),
        o = outside.display()
    );
    let (_, text) = confined(&sandbox, &project, &line).await;
    assert!(!text.contains("PRIVATE-KEY-7731"), "{text}");
    assert!(!text.contains("TOKEN-7731"), "{text}");
    assert!(text.contains("Read-only file system"), "{text}");
    assert_eq!(
        std::fs::read_to_string(project.join("inside.txt")).unwrap(),
        "in\n"
    );
    assert!(!outside.join("x").exists());
    // Its private /tmp works; its /proc shows its own few processes.
    assert!(text.contains("\nt\n") || text.starts_with("t\n"), "{text}");
    let procs: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("procs="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(procs < 10, "{text}");
    // The deny zones are still there for the daemon.
    assert!(secrets.join("id_rsa").exists());
}

#[tokio::test]
async fn other_projects_under_the_projects_root_are_invisible() {
    let dir = base();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let (mine, theirs) = (root.join("mine"), root.join("theirs"));
    for d in [&mine, &theirs] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(theirs.join("notes.md"), "THEIRS-5521").unwrap();
    let config = SandboxConfig {
        projects_root: Some(root.clone()),
        ..SandboxConfig::default()
    };
    let sandbox = bubblewrap(&config, Vec::new()).await;
    let line = format!(
        "ls {0}; cat {0}/theirs/notes.md; echo ok > own.txt",
        root.display()
    );
    let (_, text) = confined(&sandbox, &mine, &line).await;
    assert!(!text.contains("THEIRS-5521"), "{text}");
    assert!(!text.contains("theirs\n"), "{text}");
    assert!(mine.join("own.txt").exists());
}

#[tokio::test]
async fn required_without_a_mechanism_refuses_and_best_effort_runs() {
    let dir = tempfile::tempdir().unwrap();
    let missing = SandboxConfig {
        bwrap: "/nonexistent/bwrap".into(),
        // Only bubblewrap: auto would fall back to Landlock here.
        mechanism: MechanismChoice::Bwrap,
        ..SandboxConfig::default()
    };
    let required = Arc::new(
        Sandbox::detect(
            &SandboxConfig {
                mode: Some(SandboxMode::Required),
                ..missing.clone()
            },
            Vec::new(),
        )
        .await,
    );
    assert_eq!(required.facts()["mechanism"], "none");
    let setup = ChildSetup {
        sandbox: Some(required),
        ..ChildSetup::default()
    };
    let marker = dir.path().join("ran");
    let line = format!("touch {}", marker.display());
    let err = run(
        &setup.spec("bash", &["-c", &line], dir.path()),
        &CancellationToken::new(),
    )
    .await
    .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("/nonexistent/bwrap"), "{text}");
    assert!(text.contains("required"), "{text}");
    assert!(!marker.exists());
    // Unset, the mode follows what was found: best_effort here, which runs it.
    let unset = Arc::new(Sandbox::detect(&missing, Vec::new()).await);
    assert_eq!(unset.mode(), SandboxMode::BestEffort);
    let setup = ChildSetup {
        sandbox: Some(unset),
        ..ChildSetup::default()
    };
    run(
        &setup.spec("bash", &["-c", &line], dir.path()),
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    assert!(marker.exists());
}
