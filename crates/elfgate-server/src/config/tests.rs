//! Unit tests of reading the configuration.

use super::Config;

pub(super) fn try_load(toml: &str) -> Result<Config, super::ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("elfgate.toml");
    // A fleet's secret in a file of the daemon's user alone.
    let secret = dir.path().join("fleet-secret");
    std::fs::write(&secret, "0123456789abcdef0123456789abcdef").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let toml = toml.replace(
        "[cluster]\n",
        &format!("[cluster]\nsecret_file = \"{}\"\n", secret.display()),
    );
    std::fs::write(&file, toml).unwrap();
    Config::load(Some(&file))
}

fn load(toml: &str) -> Config {
    try_load(toml).unwrap()
}

#[test]
fn a_node_without_an_id_is_named_by_its_host_and_port() {
    let config = load(
        "[server]\nbind = \"127.0.0.1:7431\"\n[storage]\nurl = \"postgres://x@127.0.0.1/x\"\n\
         [cluster]\nnats_url = \"nats://127.0.0.1:4222\"\n",
    );
    let member = config.fleet_member().unwrap().unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert!(member.node_id.ends_with("-7431"), "{}", member.node_id);
    let named = member.node_id.trim_end_matches("-7431");
    assert_eq!(named.len(), host.trim().len(), "{}", member.node_id);
    assert!(
        named
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
        "{}",
        member.node_id
    );
    assert_eq!(member.address, "http://127.0.0.1:7431");
    assert_eq!(member.lease, std::time::Duration::from_secs(5));
    assert_eq!(member.heartbeat, std::time::Duration::from_secs(1));
    // Named by hand, it keeps that name; on port 0 it must be.
    let named = load(
        "[server]\nbind = \"127.0.0.1:0\"\n[storage]\nurl = \"postgres://x@127.0.0.1/x\"\n\
         [cluster]\nnats_url = \"nats://127.0.0.1:4222\"\nnode_id = \"n1\"\n",
    );
    assert_eq!(named.fleet_member().unwrap().unwrap().node_id, "n1");
    // An address given is the one the fleet lists; one that is no URL is refused by name.
    let advertised = load(
        "[server]\nbind = \"0.0.0.0:7431\"\n[storage]\nurl = \"postgres://x@127.0.0.1/x\"\n\
         [cluster]\nnats_url = \"nats://127.0.0.1:4222\"\naddress = \"http://elfgate-a:7420\"\n",
    );
    assert_eq!(
        advertised.fleet_member().unwrap().unwrap().address,
        "http://elfgate-a:7420"
    );
    let err = try_load(
        "[storage]\nurl = \"postgres://x@127.0.0.1/x\"\n[cluster]\n\
         nats_url = \"nats://127.0.0.1:4222\"\naddress = \"elfgate-a:7420\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("cluster.address"), "{err}");
    let unnamed = load(
        "[server]\nbind = \"127.0.0.1:0\"\n[storage]\nurl = \"postgres://x@127.0.0.1/x\"\n\
         [cluster]\nnats_url = \"nats://127.0.0.1:4222\"\n",
    );
    let err = unnamed.fleet_member().unwrap_err().to_string();
    assert!(err.contains("cluster.node_id"), "{err}");
}

#[test]
fn a_fleet_without_a_usable_secret_is_refused_by_name() {
    let pg = "[storage]\nurl = \"postgres://x@127.0.0.1/x\"\n";
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("elfgate.toml");
    let refused = |cluster: &str| {
        std::fs::write(
            &file,
            format!("{pg}[cluster]\nnats_url = \"nats://h:4222\"\n{cluster}"),
        )
        .unwrap();
        Config::load(Some(&file)).unwrap_err().to_string()
    };
    let err = refused("");
    assert!(
        err.contains("cluster.secret_env (or cluster.secret_file) is required"),
        "{err}"
    );
    let err = refused("secret_env = \"ELFGATE_NO_SUCH_VARIABLE_EVER\"\n");
    assert!(
        err.contains("ELFGATE_NO_SUCH_VARIABLE_EVER is not set"),
        "{err}"
    );
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "short").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let err = refused(&format!("secret_file = \"{}\"\n", secret.display()));
    assert!(err.contains("fewer than 32 bytes"), "{err}");
    std::fs::write(&secret, "0123456789abcdef0123456789abcdef").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
    let err = refused(&format!("secret_file = \"{}\"\n", secret.display()));
    assert!(err.contains("readable by other users"), "{err}");
    let err = refused(&format!(
        "secret_file = \"{}\"\nsecret_env = \"X\"\n",
        secret.display()
    ));
    assert!(err.contains("not both"), "{err}");
}
