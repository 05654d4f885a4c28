//! What a CLI run leaves readable to other local users: nothing. Its MCP servers' secrets are
//! handed over in an owner-only file, never on the command line (`ps`, /proc/PID/cmdline); the
//! data directory, the CLIs' homes and the configuration files written there are owner-only.

use super::cli_engine::{CliDaemon, cli_opts, complete, errors, start};

use elfgate_mockllm::MockServer;
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// claude-sdk hands the session's MCP servers to claude-code (claude's own format, in a file
/// named by `--mcp-config`, with `--strict-mcp-config`) and runs it through the daemon's door
/// even on an Anthropic provider; the servers' headers and variables are on no command line,
/// and the file is owner-only and gone when the run ends. The plain cli engine hands neither.
#[tokio::test]
async fn claude_sdk_hands_the_sessions_mcp_servers_to_claude_code_off_its_command_line() {
    let mock = MockServer::start().await.unwrap();
    let c = start(&mock, "", "");
    let mcp = json!({"servers": {
        "files": {"command": "node", "args": ["files.js"],
                  "env": {"ROOT": "/srv", "FILES_TOKEN": "env-secret-4711"}},
        "remote": {"url": "http://127.0.0.1:9/mcp",
                   "headers": {"Authorization": "Bearer header-secret-0815"}}
    }});
    // A long run, so that the CLI's process can be looked at while it works.
    let mut body = c.session("claude-code", "slow");
    body["engine"] = json!("claude-sdk");
    body.as_object_mut().unwrap().remove("cliBackend");
    body["mcpConfig"] = mcp.clone();
    body["model"] = json!("claude-fake");
    let (sid, run) = c.d.create(body).await;
    let mut sse = c.d.events(&sid, None).await;
    sse.until_n("streamDelta", 1).await;
    let rec = c.until_record("claude-code", "slow", false).await;
    let pid = rec.running("pid").unwrap();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    for secret in ["env-secret-4711", "header-secret-0815", "mcpServers"] {
        assert!(!cmdline.contains(secret), "{secret} in {cmdline}");
    }
    let args = rec.args();
    let at = args.iter().position(|a| a == "--mcp-config").unwrap();
    assert!(args.iter().any(|a| a == "--strict-mcp-config"));
    let handed = &rec.0["mcp_config"][0];
    let file = Path::new(handed["file"].as_str().unwrap());
    assert_eq!(file, Path::new(&args[at + 1]));
    assert_eq!(
        handed["config"],
        json!({"mcpServers": {
            "files": {"type": "stdio", "command": "node", "args": ["files.js"],
                      "env": {"ROOT": "/srv", "FILES_TOKEN": "env-secret-4711"}},
            "remote": {"type": "http", "url": "http://127.0.0.1:9/mcp",
                       "headers": {"Authorization": "Bearer header-secret-0815"}}
        }})
    );
    assert_eq!(handed["mode"], "0o600", "{handed}");
    assert_eq!(mode(file.parent().unwrap()), 0o700);
    assert!(
        file.starts_with(&c.d.dir),
        "{} is not in the data directory",
        file.display()
    );
    assert!(
        rec.env("ANTHROPIC_API_KEY")
            .is_some_and(|k| k.starts_with("elfgate-run-")),
        "through the door even on an Anthropic provider"
    );
    let (status, r) =
        c.d.post(
            &format!("/v1/sessions/{sid}/interrupt"),
            json!({"wait": true}),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    let evs = sse.until_complete(&run).await;
    assert_eq!(complete(&evs), ["interrupted"], "{:?}", errors(&evs));
    assert!(!file.exists(), "{} outlived its run", file.display());
    assert!(!file.parent().unwrap().exists());

    // The cli engine's claude-code gets neither.
    let mut body = c.session("claude-code", "again");
    body["mcpConfig"] = mcp;
    let (sid, run) = c.d.create(body).await;
    c.d.events(&sid, None).await.until_complete(&run).await;
    let rec = c.until_record("claude-code", "again", false).await;
    assert!(!rec.args().iter().any(|a| a == "--mcp-config"));
    assert_eq!(rec.env("ANTHROPIC_API_KEY"), Some("sk-anthropic"));
}

/// A daemon whose data directory it creates itself: the directory, the CLIs' homes and the
/// configuration files it writes into them are the daemon's user's only, as the database is.
#[tokio::test]
async fn the_data_directory_and_the_clis_homes_and_files_are_owner_only() {
    let mock = MockServer::start().await.unwrap();
    let (mut opts, records, project) = cli_opts(&mock, "", "", "");
    let data = records.parent().unwrap().join("fresh").join("data");
    opts.env.push((
        "ELFGATE_DATABASE_URL".into(),
        format!("sqlite://{}", data.join("elfgate.db").display()),
    ));
    opts.token = Some("private-files-token".into());
    let c = CliDaemon::start(&mock, (opts, records, project));
    for b in ["codex", "gemini-cli"] {
        let (sid, run) = c.d.create(c.session(b, "text")).await;
        let evs = c.d.events(&sid, None).await.until_complete(&run).await;
        assert_eq!(complete(&evs), ["stop"], "{b}: {:?}", errors(&evs));
    }
    let codex = c.until_record("codex", "text", false).await;
    let gemini = c.until_record("gemini-cli", "text", false).await;

    assert_eq!(mode(&data), 0o700, "the data directory");
    assert_eq!(mode(data.parent().unwrap()), 0o700, "a parent it created");
    assert_eq!(mode(&data.join("elfgate.db")), 0o600);
    assert_eq!(mode(&data.join("cli")), 0o700, "the CLIs' state directory");
    let homes: Vec<(&str, &Value)> = vec![("codex", &codex.0), ("gemini-cli", &gemini.0)];
    for (b, rec) in homes {
        let home = Path::new(rec["env"]["HOME"].as_str().unwrap());
        assert!(home.starts_with(&data), "{b}: {}", home.display());
        assert_eq!(mode(home), 0o700, "{b}'s home");
    }
    let codex_config = Path::new(codex.env("CODEX_HOME").unwrap()).join("config.toml");
    assert_eq!(mode(&codex_config), 0o600, "{}", codex_config.display());
    let gemini_home = Path::new(gemini.env("HOME").unwrap());
    assert_eq!(mode(&gemini_home.join(".gemini")), 0o700);
    assert_eq!(mode(&gemini_home.join(".gemini/settings.json")), 0o600);
}

/// A data directory that exists already keeps its mode (it may be shared on purpose), and the
/// daemon says at start that others can read it; the CLIs' homes in it, which an older daemon
/// made readable, are made owner-only.
#[tokio::test]
async fn an_existing_data_directory_open_to_others_is_warned_about_and_its_cli_homes_closed() {
    let mock = MockServer::start().await.unwrap();
    let (mut opts, records, project) = cli_opts(&mock, "", "", "");
    let data = records.parent().unwrap().join("shared");
    let old_home = data.join("cli").join("codex");
    std::fs::create_dir_all(&old_home).unwrap();
    for dir in [&data, &data.join("cli"), &old_home] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let log = records.parent().unwrap().join("daemon.log");
    opts.env.push((
        "ELFGATE_DATABASE_URL".into(),
        format!("sqlite://{}", data.join("elfgate.db").display()),
    ));
    opts.token = Some("private-files-token".into());
    opts.log_file = Some(log.clone());
    let c = CliDaemon::start(&mock, (opts, records, project));
    let (status, _) = c.d.get("/v1/sessions").await;
    assert_eq!(status, 200);
    assert_eq!(
        mode(&data),
        0o755,
        "an existing directory's mode is left alone"
    );
    assert_eq!(mode(&data.join("cli")), 0o700);
    assert_eq!(mode(&old_home), 0o700);
    let text = std::fs::read_to_string(&log).unwrap();
    let warning = text
        .lines()
        .find(|l| l.contains("the data directory can be read by other users"))
        .unwrap_or_else(|| panic!("no warning in {text}"));
    assert!(warning.contains(&data.display().to_string()), "{warning}");
}
