//! Daemon lifecycle: SIGKILL mid-run and restart, graceful SIGTERM, startup refusals.

use crate::common;

use common::{Daemon, Opts, chat, text_of, types};
use elfgate_mockllm::MockServer;
use serde_json::json;
use std::process::{Command, Stdio};

#[tokio::test]
async fn sigkill_mid_run_then_restart_ends_the_run_with_daemon_restart() {
    let mock = MockServer::start().await.unwrap();
    let mut d = Daemon::start(&mock, Opts::default());
    // A finished first turn, then a second turn that stalls mid-stream.
    let (sid, run1) = d.create(chat("first", "mock:tokens=3")).await;
    let mut sse = d.events(&sid, None).await;
    sse.until_complete(&run1).await;
    let run2 = d
        .send(
            &sid,
            json!({"prompt": "second", "model": "mock:tokens=50,stall_after=4"}),
        )
        .await;
    let seen = sse.until_text("tok0 tok1 tok2 tok3 ").await;
    let last_seen = seen.last().unwrap().seq();
    d.kill();
    drop(sse);

    let d = Daemon::start_in(d.dir.clone(), &mock, Opts::default());
    let (status, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run2}")).await;
    assert_eq!(status, 200);
    assert_eq!(r["status"], "interrupted");
    assert_eq!(r["finishReason"], "daemon_restart");

    // The log ends the run with result + complete{daemon_restart}; seq keeps growing without reuse.
    let mut sse = d.events(&sid, None).await;
    let evs = sse.until_complete(&run2).await;
    let n = evs.len();
    assert_eq!(evs[n - 1].data["finishReason"], "daemon_restart");
    assert_eq!(evs[n - 2].event, "result");
    assert_eq!(evs[n - 2].data["stats"]["finishReason"], "daemon_restart");
    for w in evs.windows(2) {
        assert!(
            w[1].seq() > w[0].seq(),
            "seq not increasing: {:?}",
            types(&evs)
        );
    }
    assert!(evs[n - 1].seq() > last_seen);
    assert_eq!(
        evs.iter().filter(|e| e.event == "complete").count(),
        2,
        "one complete per run"
    );

    // Stored messages are intact: the first turn, the second prompt, and the partial answer
    // rebuilt from the deltas that reached the log.
    let (_, m) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    let msgs = m["messages"].as_array().unwrap();
    assert_eq!(msgs[0]["blocks"][0]["text"], "first");
    assert_eq!(msgs[1]["blocks"][0]["text"], "tok0 tok1 tok2 ");
    assert_eq!(msgs[2]["blocks"][0]["text"], "second");
    if let Some(partial) = msgs.get(3) {
        assert_eq!(partial["role"], "assistant");
        assert!("tok0 tok1 tok2 tok3 ".starts_with(partial["blocks"][0]["text"].as_str().unwrap()));
    }
    let (_, s) = d.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(s["status"], "idle");

    // The session goes on; its seq continues after the recovered events.
    let run3 = d
        .send(&sid, json!({"prompt": "third", "model": "mock:tokens=2"}))
        .await;
    let more = sse.until_complete(&run3).await;
    assert_eq!(more[0].seq(), evs[n - 1].seq() + 1);
    assert_eq!(text_of(&more), "tok0 tok1 ");
}

#[tokio::test]
async fn sigkill_right_after_a_run_ends_still_logs_its_end_once() {
    let mock = MockServer::start().await.unwrap();
    let mut d = Daemon::start(&mock, Opts::default());
    let (sid, run) = d.create(chat("q", "mock:tokens=3")).await;
    let mut sse = d.events(&sid, None).await;
    let seen = sse.until_complete(&run).await;
    // Killed at once: the run's end is stored, its last events may not have reached the log.
    d.kill();
    drop(sse);

    let d = Daemon::start_in(d.dir.clone(), &mock, Opts::default());
    let (_, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run}")).await;
    assert_eq!(r["status"], "completed", "{r}");
    let mut sse = d.events(&sid, None).await;
    let evs = sse.until_complete(&run).await;
    let last = evs.last().unwrap();
    assert_eq!(last.data["finishReason"], "stop");
    assert_eq!(evs[evs.len() - 2].event, "result");
    assert_eq!(types(&evs).iter().filter(|t| **t == "complete").count(), 1);
    // Whatever was logged before the kill keeps its seq; anything logged again sits above what
    // the client saw.
    for e in &evs {
        if let Some(same) = seen.iter().find(|s| s.seq() == e.seq()) {
            assert_eq!(same.event, e.event);
        }
    }
    assert!(last.seq() >= seen.last().unwrap().seq());
    // The session goes on.
    let run2 = d
        .send(&sid, json!({"prompt": "again", "model": "mock:tokens=2"}))
        .await;
    let more = sse.until_complete(&run2).await;
    assert_eq!(text_of(&more), "tok0 tok1 ");
}

#[tokio::test]
async fn sigterm_interrupts_runs_and_flushes_the_log() {
    let mock = MockServer::start().await.unwrap();
    let mut d = Daemon::start(&mock, Opts::default());
    let (sid, run) = d.create(chat("go", "mock:tokens=50,stall_after=2")).await;
    let mut sse = d.events(&sid, None).await;
    sse.until_text("tok0 tok1 ").await;
    let status = d.terminate();
    assert!(status.success(), "daemon exited with {status}");
    // The daemon ended the stream before exiting; it was not cut off by the exit.
    sse.rest().await.unwrap();

    let d = Daemon::start_in(d.dir.clone(), &mock, Opts::default());
    let evs = d.all_events_until_complete_of(&sid, &run).await;
    // A graceful stop interrupts the run itself: finish reason interrupted, not daemon_restart.
    assert_eq!(evs.last().unwrap().data["finishReason"], "interrupted");
    assert_eq!(text_of(&evs), "tok0 tok1 ");
    let (_, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run}")).await;
    assert_eq!(r["finishReason"], "interrupted");
    let (_, m) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    assert_eq!(m["messages"][1]["blocks"][0]["text"], "tok0 tok1 ");
}

pub(crate) fn run_elfgate(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_elfgate"));
    cmd.args(args)
        .env_remove("ELFGATE_TOKEN")
        .env_remove("ELFGATE_BIND")
        .env_remove("ELFGATE_DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn refuses_public_bind_without_auth_and_bad_config() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/x.db", dir.path().display());
    let (ok, out) = run_elfgate(
        &["serve"],
        &[
            ("ELFGATE_BIND", "0.0.0.0:0"),
            ("ELFGATE_DATABASE_URL", &db),
            ("ELFGATE_SERVER__AUTH", "none"),
        ],
    );
    assert!(!ok);
    assert!(out.contains("only allowed on a loopback address"), "{out}");

    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[providers.x]\nkind = \"nonsense\"\nbase_url = \"http://x\"\n",
    )
    .unwrap();
    let (ok, out) = run_elfgate(&["config", "check", "--config", bad.to_str().unwrap()], &[]);
    assert!(!ok);
    assert!(out.contains("invalid configuration"), "{out}");
    assert!(out.contains("nonsense"), "{out}");

    let (ok, out) = run_elfgate(
        &["config", "check"],
        &[("ELFGATE_DEFAULTS__PROVIDER", "nowhere")],
    );
    assert!(!ok);
    assert!(out.contains("defaults.provider 'nowhere'"), "{out}");

    let (ok, out) = run_elfgate(&["config", "check"], &[("ELFGATE_DATABASE_URL", &db)]);
    assert!(ok, "{out}");
    assert!(out.contains("configuration is valid"), "{out}");
    assert!(out.contains("cluster: none (a single node)"), "{out}");
    // A fleet node's section is checked and shown (no database or NATS server is reached); its
    // secret, which signs the bus, is required.
    let fleet = [
        (
            "ELFGATE_DATABASE_URL",
            "postgres://elfgate:secret@db.invalid/elfgate",
        ),
        ("ELFGATE_CLUSTER__NATS_URL", "nats://nats.invalid:4222"),
        ("ELFGATE_CLUSTER__NODE_ID", "n1"),
    ];
    let (ok, out) = run_elfgate(&["config", "check"], &fleet);
    assert!(!ok, "{out}");
    assert!(
        out.contains("cluster.secret_env (or cluster.secret_file) is required"),
        "{out}"
    );
    let short = [
        ("ELFGATE_CLUSTER__SECRET_ENV", "FLEET_SECRET"),
        ("FLEET_SECRET", "short"),
    ];
    let (ok, out) = run_elfgate(&["config", "check"], &[&fleet[..], &short[..]].concat());
    assert!(!ok, "{out}");
    assert!(
        out.contains("the variable FLEET_SECRET holds fewer than 32 bytes"),
        "{out}"
    );
    let with_secret = [
        ("ELFGATE_CLUSTER__SECRET_ENV", "FLEET_SECRET"),
        ("FLEET_SECRET", elfgate_test_support::services::FLEET_SECRET),
    ];
    let (ok, out) = run_elfgate(
        &["config", "check"],
        &[&fleet[..], &with_secret[..]].concat(),
    );
    assert!(ok, "{out}");
    assert!(
        out.contains("cluster: node n1 of the fleet on postgres://elfgate:")
            && out.contains("NATS nats://nats.invalid:4222, lease 5 s, heartbeat 1 s, drain 30 s")
            && !out.contains("secret"),
        "{out}"
    );

    let (ok, out) = run_elfgate(&["migrate"], &[("ELFGATE_DATABASE_URL", &db)]);
    assert!(ok, "{out}");
    assert!(dir.path().join("x.db").exists());
}

/// Runs `elfgate ARGS --config` with `d`'s configuration (and `database`, a URL, over its
/// database when given) to its end.
async fn elfgate_beside(
    d: &Daemon,
    args: &[&str],
    database: Option<&str>,
) -> (std::process::ExitStatus, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_elfgate"));
    cmd.args(args)
        .arg("--config")
        .arg(d.dir.join("elfgate.toml"))
        .env_remove("ELFGATE_TOKEN")
        .env_remove("ELFGATE_BIND")
        .env_remove("ELFGATE_DATABASE_URL");
    if let Some(url) = database {
        cmd.env("ELFGATE_DATABASE_URL", url);
    }
    let child = cmd
        .env("ELFGATE_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(common::GUARD, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("`elfgate {}` did not exit", args.join(" ")))
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status, text)
}

#[tokio::test]
async fn a_second_daemon_on_the_same_database_refuses_to_start() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let (sid, run) = d.create(chat("long", "mock:tokens=400,delay_ms=25")).await;
    let mut sse = d.events(&sid, None).await;
    let mut evs = sse.until_text("tok0 tok1 ").await;

    let db = d.dir.join("elfgate.db");
    let lock = d.dir.join("elfgate.db.lock");
    // Also when the second one names the file through a symlink, or through a symlink to its
    // directory: the lock is the real file's.
    let link = d.dir.join("alias.db");
    std::os::unix::fs::symlink(&db, &link).unwrap();
    let dir_link = d.dir.with_extension("elsewhere");
    std::os::unix::fs::symlink(&d.dir, &dir_link).unwrap();
    let spellings = [
        None,
        Some(format!("sqlite://{}", link.display())),
        Some(format!(
            "sqlite://{}",
            dir_link.join("elfgate.db").display()
        )),
    ];
    for database in &spellings {
        for args in [&["serve"][..], &["migrate"][..]] {
            let (status, out) = elfgate_beside(&d, args, database.as_deref()).await;
            assert!(
                !status.success(),
                "`elfgate {args:?}` on {database:?} started beside the daemon: {out}"
            );
            assert!(out.contains("in use by another elfgate process"), "{out}");
            assert!(out.contains(&lock.display().to_string()), "{out}");
            assert!(out.contains(&db.display().to_string()), "{out}");
        }
    }
    std::fs::remove_file(&dir_link).unwrap();

    // The first daemon's run was left alone: it streams to its normal end, ended once.
    evs.extend(sse.until_complete(&run).await);
    assert_eq!(evs.last().unwrap().data["finishReason"], "stop");
    assert_eq!(types(&evs).iter().filter(|t| **t == "complete").count(), 1);
    let want: String = (0..400).map(|i| format!("tok{i} ")).collect();
    assert_eq!(text_of(&evs), want);
    let (_, r) = d.get(&format!("/v1/sessions/{sid}/runs/{run}")).await;
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["finishReason"], "stop", "{r}");
}

/// A hard link is another name for the database file with its own `.lock` (and `-wal`) beside
/// it: a second daemon on it still refuses to start, since the lock is the file's, and the first
/// daemon's run is left alone.
#[tokio::test]
async fn a_second_daemon_on_a_hard_link_to_the_database_refuses_to_start() {
    let mock = MockServer::start().await.unwrap();
    let d = Daemon::start(&mock, Opts::default());
    let (sid, run) = d.create(chat("long", "mock:tokens=200,delay_ms=10")).await;
    let mut sse = d.events(&sid, None).await;
    let mut evs = sse.until_text("tok0 tok1 ").await;

    let link = d.dir.join("hard.db");
    std::fs::hard_link(d.dir.join("elfgate.db"), &link).unwrap();
    let database = format!("sqlite://{}", link.display());
    for args in [&["serve"][..], &["migrate"][..]] {
        let (status, out) = elfgate_beside(&d, args, Some(&database)).await;
        assert!(
            !status.success(),
            "`elfgate {args:?}` on a hard link started beside the daemon: {out}"
        );
        assert!(out.contains("in use by another elfgate process"), "{out}");
        assert!(out.contains("hard link"), "{out}");
    }

    evs.extend(sse.until_complete(&run).await);
    assert_eq!(evs.last().unwrap().data["finishReason"], "stop");
    let want: String = (0..200).map(|i| format!("tok{i} ")).collect();
    assert_eq!(text_of(&evs), want);
    let (_, check) = d.get(&format!("/v1/sessions/{sid}/messages")).await;
    assert_eq!(check["messages"][1]["blocks"][0]["text"], want.as_str());
}

/// Only `ELFGATE_<SECTION>__<KEY>` and the documented single variables are configuration: the
/// terminal client's `ELFGATE_URL` is ignored, and any other `ELFGATE_` name an operator chose is
/// ignored with one warning naming it (never its value), by `config check` and by `serve`.
#[test]
fn variables_that_are_not_configuration_keys_are_ignored_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/x.db", dir.path().display());
    let others = [
        ("ELFGATE_URL", "http://127.0.0.1:7420"),
        ("ELFGATE_WEBHOOK_SECRET", "s3cr3t-value"),
    ];
    let mut env = vec![
        ("ELFGATE_DATABASE_URL", db.as_str()),
        ("ELFGATE_LOG", "warn"),
    ];
    env.extend(others);
    let (ok, out) = run_elfgate(&["config", "check"], &env);
    assert!(ok, "{out}");
    assert!(out.contains("configuration is valid"), "{out}");
    let warnings: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("not configuration"))
        .collect();
    assert_eq!(warnings.len(), 1, "{out}");
    // The client's own variable is documented, so not warned about.
    assert!(
        warnings[0].contains("ELFGATE_WEBHOOK_SECRET") && !warnings[0].contains("ELFGATE_URL"),
        "{out}"
    );
    assert!(!out.contains("s3cr3t-value"), "{out}");
    // A real key is still read (and checked) beside them.
    env.push(("ELFGATE_DEFAULTS__PROVIDER", "nowhere"));
    let (ok, out) = run_elfgate(&["config", "check"], &env);
    assert!(!ok, "{out}");
    assert!(out.contains("defaults.provider 'nowhere'"), "{out}");

    // `serve` starts with them set (here it stops at its own refusal of a public address
    // without auth, which comes after the configuration is read).
    let env = [
        ("ELFGATE_DATABASE_URL", db.as_str()),
        ("ELFGATE_BIND", "0.0.0.0:0"),
        ("ELFGATE_SERVER__AUTH", "none"),
        ("ELFGATE_URL", "http://127.0.0.1:7420"),
    ];
    let (ok, out) = run_elfgate(&["serve"], &env);
    assert!(!ok);
    assert!(out.contains("only allowed on a loopback address"), "{out}");
    assert!(!out.contains("unknown field"), "{out}");
}

/// `config check` (and so `serve`) refuses an alias that could only fail at request time, or
/// would drop its fallbacks unseen, naming the alias and why; a sound one passes.
#[test]
fn config_check_refuses_aliases_that_cannot_work() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("a = \"a\"", "aliases.a: 'a' names the alias itself"),
        (
            "a = \"b\"\nb = \"a\"",
            "is another alias; aliases do not nest",
        ),
        (
            "a = \"mock/m\"\nb = [\"a\", \"mock/n\"]",
            "aliases.b: 'a' is another alias",
        ),
        (
            "a = [\"elfgate:chat\", \"mock/m\"]",
            "aliases.a: 'elfgate:chat' is an engine route; a chain may hold PROVIDER/MODEL routes only",
        ),
        (
            "a = [\"mock/m\", \"elfgate:tinyelf\"]",
            "aliases.a: 'elfgate:tinyelf' is an engine route",
        ),
        ("a = \"elfgate:nonsense\"", "aliases.a: 'elfgate:nonsense'"),
        (
            "a = \"gpt-4\"",
            "aliases.a: 'gpt-4' is neither PROVIDER/MODEL nor elfgate:ENGINE",
        ),
        ("a = \"mock/\"", "aliases.a: 'mock/' names no model"),
        ("a = []", "aliases.a: names no route"),
        (
            "a = \"nowhere/m\"",
            "aliases.a: 'nowhere/m' names provider 'nowhere', which is not configured",
        ),
    ];
    for (aliases, want) in cases {
        let file = dir.path().join("aliases.toml");
        std::fs::write(&file, format!("[aliases]\n{aliases}\n")).unwrap();
        let (ok, out) = run_elfgate(
            &["config", "check", "--config", file.to_str().unwrap()],
            &[],
        );
        assert!(!ok, "{aliases}: accepted: {out}");
        assert!(out.contains(want), "{aliases}: {out}");
    }
    let file = dir.path().join("good.toml");
    std::fs::write(
        &file,
        "[aliases]\nfast = \"mock/m\"\nchain = [\"mock/m\", \"mock/n\"]\nagent = \"elfgate:tinyelf:mock/m\"\nbare = \"elfgate:chat\"\n",
    )
    .unwrap();
    let (ok, out) = run_elfgate(
        &["config", "check", "--config", file.to_str().unwrap()],
        &[],
    );
    assert!(ok, "{out}");
}

/// `config check` (and so `serve`) refuses an agent profile that could only fail when a session
/// names it, naming the profile and the key.
#[test]
fn config_check_refuses_agent_profiles_that_cannot_work() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "provider = \"nowhere\"",
            "agents.a.provider 'nowhere' is not a configured provider",
        ),
        (
            "engine_config = { maxIteration = 3 }",
            "agents.a.engineConfig.maxIteration: unknown field",
        ),
        (
            "tools = [\"grep\"]\nengine_config = { enabledTools = [\"grep\"] }",
            "agents.a: tools and skills are given twice",
        ),
        (
            "permission_mode = \"yolo\"",
            "found `yolo`, expected `one of `default`",
        ),
    ];
    for (profile, want) in cases {
        let file = dir.path().join("agents.toml");
        std::fs::write(&file, format!("[agents.a]\n{profile}\n")).unwrap();
        let (ok, out) = run_elfgate(
            &["config", "check", "--config", file.to_str().unwrap()],
            &[],
        );
        assert!(!ok, "{profile}: accepted: {out}");
        assert!(out.contains(want), "{profile}: {out}");
    }
}

/// `config check` lists the unpriced models a route can reach; a cache price without the input
/// and output prices, or an input price without an output price, is refused naming the key.
#[test]
fn config_check_lists_unpriced_models_and_refuses_half_prices() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("prices.toml");
    std::fs::write(
        &file,
        "[providers.paid]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n\
         input_usd_per_mtok = 1.0\noutput_usd_per_mtok = 2.0\n\
         [providers.free]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n\
         default_model = \"small\"\n\
         [providers.free.models.\"big\"]\ninput_usd_per_mtok = 1.0\noutput_usd_per_mtok = 2.0\n\
         [aliases]\ncheap = \"free/tiny\"\n",
    )
    .unwrap();
    let (ok, out) = run_elfgate(
        &["config", "check", "--config", file.to_str().unwrap()],
        &[],
    );
    assert!(ok, "{out}");
    let line = out
        .lines()
        .find(|l| l.contains("unpriced models"))
        .unwrap_or_else(|| panic!("{out}"));
    for want in [
        "free/small",
        "free/tiny",
        "free/*",
        "a budget would not see them",
    ] {
        assert!(line.contains(want), "{want}: {line}");
    }
    for priced in ["paid/", "free/big"] {
        assert!(!line.contains(priced), "{priced}: {line}");
    }
    for (toml, want) in [
        (
            "[providers.p]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\ninput_usd_per_mtok = 1.0\n",
            "providers.p: input_usd_per_mtok and output_usd_per_mtok go together",
        ),
        (
            "[providers.p]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n[providers.p.models.\"m\"]\ncache_read_usd_per_mtok = 0.1\n",
            "providers.p.models.\"m\": a cache price needs input_usd_per_mtok",
        ),
    ] {
        std::fs::write(&file, toml).unwrap();
        let (ok, out) = run_elfgate(
            &["config", "check", "--config", file.to_str().unwrap()],
            &[],
        );
        assert!(!ok, "{toml}: accepted: {out}");
        assert!(out.contains(want), "{toml}: {out}");
    }
}

/// A model price that is no amount of dollars, an attachment limit of nothing, or a webhook
/// setting of nothing or a target that is not an http(s) URL is refused at start naming the key.
#[test]
fn config_check_refuses_bad_prices_and_attachment_limits() {
    let dir = tempfile::tempdir().unwrap();
    for (toml, want) in [
        (
            "[providers.p]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\ninput_usd_per_mtok = -1.0\n",
            "providers.p.input_usd_per_mtok must be a finite number of dollars",
        ),
        (
            "[providers.p]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n[providers.p.models.\"m\"]\noutput_usd_per_mtok = nan\n",
            "providers.p.models.\"m\".output_usd_per_mtok must be a finite number",
        ),
        (
            "[server]\nbind = \"127.0.0.1:0\"\nbody_limit_bytes = 1000\nkeepalive_secs = 15\nshutdown_grace_secs = 1\nattachment_max_bytes = 0\n",
            "server.attachment_max_bytes must be positive",
        ),
        (
            "[webhooks]\nmax_attempts = 0\n",
            "webhooks.max_attempts: at least 1",
        ),
        (
            "[webhooks]\ntimeout_secs = 0\n",
            "webhooks.timeout_secs: at least 1",
        ),
        (
            "[[webhooks.targets]]\nname = \"t\"\nurl = \"ftp://x\"\nsecret_env = \"S\"\n",
            "webhooks.targets 't': url 'ftp://x' is not an http or https URL",
        ),
    ] {
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, toml).unwrap();
        let (ok, out) = run_elfgate(
            &["config", "check", "--config", file.to_str().unwrap()],
            &[],
        );
        assert!(!ok, "{toml}: accepted: {out}");
        assert!(out.contains(want), "{toml}: {out}");
    }
}
