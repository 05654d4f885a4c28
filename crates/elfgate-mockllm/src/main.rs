//! `elfgate-mockllm [--bind ADDR]`: run the mock LLM provider server standalone.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a binary: what it prints is its output"
)]

use std::io::Write;

use anyhow::{Context, bail};

fn usage() -> String {
    format!(
        "usage: elfgate-mockllm [--bind ADDR]   (default {})",
        elfgate_mockllm::DEFAULT_BIND
    )
}

fn parse_args() -> anyhow::Result<Option<String>> {
    let mut bind = elfgate_mockllm::DEFAULT_BIND.to_string();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bind" => {
                bind = args
                    .next()
                    .with_context(|| format!("--bind needs a value\n{}", usage()))?;
            }
            a if a.starts_with("--bind=") => {
                bind = a.trim_start_matches("--bind=").to_string();
            }
            "-h" | "--help" => {
                println!("{}", usage());
                return Ok(None);
            }
            other => bail!("unknown argument '{other}'\n{}", usage()),
        }
    }
    Ok(Some(bind))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let bind = match parse_args() {
        Ok(Some(bind)) => bind,
        Ok(None) => return Ok(()),
        Err(e) => {
            eprintln!("elfgate-mockllm: {e:#}");
            std::process::exit(2);
        }
    };
    let listener = tokio::net::TcpListener::bind(&bind)
        .await
        .with_context(|| format!("binding {bind}"))?;
    let addr = listener.local_addr().context("reading local address")?;
    let mut out = std::io::stdout();
    writeln!(out, "listening on http://{addr}")?;
    out.flush()?;
    elfgate_mockllm::serve_listener(listener)
        .await
        .context("serving")?;
    Ok(())
}
