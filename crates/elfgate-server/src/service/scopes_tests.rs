use super::*;
use elfgate_core::{Principal, PrincipalRole};
use std::sync::Arc;

fn actor(scopes: Scopes) -> Actor {
    Actor::Principal(Arc::new(Principal {
        user: "alice".into(),
        team: "research".into(),
        role: PrincipalRole::Member,
        key_id: Some("k1".into()),
        scopes,
    }))
}

fn target(engine: EngineType) -> RunTarget<'static> {
    RunTarget {
        engine,
        provider: Some("mock".into()),
        model: Some("mock-large".into()),
        sub_agent_model: None,
        project_path: None,
        project_field: "projectPath",
        permission_mode: PermissionMode::Default,
    }
}

/// The scope a refusal names, or None when let through.
fn scope_of(r: Result<(), ApiError>) -> Option<&'static str> {
    match r {
        Ok(()) => None,
        Err(ApiError::OutOfScope { scope, message }) => {
            assert!(
                message.contains(&format!("key scope '{scope}'")),
                "{message}"
            );
            Some(scope)
        }
        Err(other) => panic!("not a scope's refusal: {other:?}"),
    }
}

#[test]
fn without_scopes_and_for_the_daemon_everything_passes() {
    let t = RunTarget {
        provider: None,
        model: None,
        ..target(EngineType::Cli)
    };
    assert_eq!(scope_of(check_run(&actor(Scopes::default()), &t)), None);
    assert_eq!(scope_of(check_run(&Actor::Daemon, &t)), None);
    assert_eq!(scope_of(check_answer(&Actor::Daemon)), None);
    let root = Actor::Principal(Arc::new(Principal::root()));
    assert_eq!(scope_of(check_run(&root, &t)), None);
}

#[test]
fn engines_allow_only_those_listed() {
    let a = actor(Scopes {
        engines: Some(vec!["chat".into()]),
        ..Scopes::default()
    });
    assert_eq!(scope_of(check_run(&a, &target(EngineType::Chat))), None);
    let Err(e) = check_run(&a, &target(EngineType::TinyElf)) else {
        panic!("tinyelf let through");
    };
    assert_eq!(
        e.to_string(),
        "key scope 'engines' does not allow engine 'tinyelf' (it allows: chat)"
    );
    assert!(!allows_engine(&a, EngineType::TinyElf));
    assert!(allows_engine(&a, EngineType::Chat));
}

#[test]
fn providers_and_models_are_globs_and_an_unknown_one_refuses() {
    let a = actor(Scopes {
        providers: Some(vec!["mo*".into()]),
        models: Some(vec!["mock-*".into(), "gpt-4o".into()]),
        ..Scopes::default()
    });
    assert_eq!(scope_of(check_run(&a, &target(EngineType::TinyElf))), None);
    let other_provider = RunTarget {
        provider: Some("openai".into()),
        ..target(EngineType::TinyElf)
    };
    assert_eq!(scope_of(check_run(&a, &other_provider)), Some("providers"));
    let other_model = RunTarget {
        model: Some("gpt-4o-mini".into()),
        ..target(EngineType::TinyElf)
    };
    assert_eq!(scope_of(check_run(&a, &other_model)), Some("models"));
    let sub_agent = RunTarget {
        sub_agent_model: Some("big-one"),
        ..target(EngineType::TinyElf)
    };
    let Err(e) = check_run(&a, &sub_agent) else {
        panic!("subAgentModel let through");
    };
    assert!(e.to_string().contains("engineConfig.subAgentModel"), "{e}");
    // A CLI that would choose its own provider, a workflow's steps: not known, refused.
    for engine in [EngineType::Cli, EngineType::Workflow] {
        let unknown = RunTarget {
            provider: None,
            model: None,
            ..target(engine)
        };
        assert_eq!(scope_of(check_run(&a, &unknown)), Some("providers"));
    }
    assert!(allows_route(&a, "mock", "mock-x"));
    assert!(!allows_route(&a, "mock", "other"));
    // A glob that does not compile refuses rather than matching nothing silently or anything.
    let broken = actor(Scopes {
        models: Some(vec!["[".into()]),
        ..Scopes::default()
    });
    let Err(e) = check_run(&broken, &target(EngineType::Chat)) else {
        panic!("a broken glob let through");
    };
    assert!(e.to_string().contains("cannot be checked"), "{e}");
}

#[test]
fn project_roots_resolve_symlinks_on_both_sides() {
    let dir = tempfile::tempdir().unwrap();
    let real_root = dir.path().join("root");
    let inside = real_root.join("proj");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&inside).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    // The key's root is named through a symlink; a link inside the root points outside it.
    let root_link = dir.path().join("root-link");
    std::os::unix::fs::symlink(&real_root, &root_link).unwrap();
    let escape = real_root.join("escape");
    std::os::unix::fs::symlink(&outside, &escape).unwrap();
    let a = actor(Scopes {
        project_roots: Some(vec![root_link.display().to_string()]),
        ..Scopes::default()
    });
    let with = |p: &str| {
        let t = RunTarget {
            project_path: Some(p),
            ..target(EngineType::TinyElf)
        };
        scope_of(check_run(&a, &t))
    };
    let s = |p: &Path| p.display().to_string();
    assert_eq!(with(&s(&inside)), None);
    assert_eq!(with(&s(&real_root)), None);
    assert_eq!(with(&s(&outside)), Some("projectRoots"));
    assert_eq!(with(&s(&escape)), Some("projectRoots"));
    assert_eq!(
        with(&s(&inside.join("..").join("..").join("outside"))),
        Some("projectRoots")
    );
    // A sibling whose name starts like the root is not under it.
    let sibling = dir.path().join("rootx");
    std::fs::create_dir_all(&sibling).unwrap();
    assert_eq!(with(&s(&sibling)), Some("projectRoots"));
    // A path that cannot be resolved is refused, never let through.
    assert_eq!(with(&s(&real_root.join("missing"))), Some("projectRoots"));
    // Without a project: a CLI would run in the daemon's directory; tinyelf touches no files.
    let none = |engine| RunTarget {
        project_path: None,
        ..target(engine)
    };
    assert_eq!(
        scope_of(check_run(&a, &none(EngineType::Cli))),
        Some("projectRoots")
    );
    assert_eq!(scope_of(check_run(&a, &none(EngineType::TinyElf))), None);
}

#[test]
fn permission_modes_and_answers() {
    let a = actor(Scopes {
        permission_modes: Some(vec![PermissionMode::Default, PermissionMode::Plan]),
        answer_permissions: Some(false),
        ..Scopes::default()
    });
    assert_eq!(scope_of(check_run(&a, &target(EngineType::TinyElf))), None);
    let bypass = RunTarget {
        permission_mode: PermissionMode::BypassPermissions,
        ..target(EngineType::TinyElf)
    };
    assert_eq!(scope_of(check_run(&a, &bypass)), Some("permissionModes"));
    assert_eq!(scope_of(check_answer(&a)), Some("answerPermissions"));
    let may_answer = actor(Scopes {
        answer_permissions: Some(true),
        ..Scopes::default()
    });
    assert_eq!(scope_of(check_answer(&may_answer)), None);
}

#[test]
fn scopes_as_given_name_the_entry_at_fault() {
    let given = |v: serde_json::Value| check_given(&serde_json::from_value(v).unwrap());
    assert!(
        given(
            serde_json::json!({"engines": ["chat", "tinyelf"], "models": ["gpt-*"],
                                     "projectRoots": ["/srv/p"]})
        )
        .is_ok()
    );
    for (v, field) in [
        (
            serde_json::json!({"engines": ["chat", "tinyElf"]}),
            "scopes.engines[1]",
        ),
        (
            serde_json::json!({"providers": ["["]}),
            "scopes.providers[0]",
        ),
        (
            serde_json::json!({"models": ["ok", "{a"]}),
            "scopes.models[1]",
        ),
        (
            serde_json::json!({"projectRoots": ["srv/p"]}),
            "scopes.projectRoots[0]",
        ),
    ] {
        match given(v) {
            Err(ApiError::Unprocessable(m)) => assert!(m.starts_with(field), "{m}"),
            other => panic!("{field}: {other:?}"),
        }
    }
}
