//! The Kubernetes manifests of `examples/kubernetes/` checked offline by a real validator
//! (`scripts/validate-kubernetes.sh`: PyPI's kubernetes-validate, strict, against the JSON schemas of Kubernetes'
//! published OpenAPI definitions for 1.25 and 1.37). No cluster exists here, so this is what can be checked: every
//! field exists where it is written and has the right type; whether a cluster grants the capabilities is not.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn validate(files: &[PathBuf]) -> Output {
    Command::new("bash")
        .arg(repo().join("scripts/validate-kubernetes.sh"))
        .args(files)
        .output()
        .expect("cannot run scripts/validate-kubernetes.sh")
}

fn examples() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("examples/kubernetes"))
        .expect("examples/kubernetes is missing")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn the_examples_are_valid_kubernetes_for_1_25_and_1_37() {
    let files = examples();
    let names: Vec<String> = files.iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert!(
        names.contains(&"sidecar-deployment.yaml".to_string()) && names.contains(&"daemonset.yaml".to_string()),
        "expected the sidecar Deployment and the DaemonSet in examples/kubernetes, found {names:?}"
    );
    let out = validate(&files);
    let said = text(&out);
    assert!(out.status.success(), "expected every manifest to validate; the validator said:\n{said}");
    // One verdict per resource and Kubernetes version: the Deployment, the Namespace and the DaemonSet, twice.
    let passed = said.lines().filter(|l| l.contains(" passed for resource ")).count();
    assert_eq!(passed, 6, "expected 6 `passed` verdicts (3 resources x 2 versions); the validator said:\n{said}");

    let sidecar = std::fs::read_to_string(repo().join("examples/kubernetes/sidecar-deployment.yaml")).unwrap();
    for needle in ["shareProcessNamespace: true", "\"PERFMON\", \"SYS_PTRACE\"", "type: Unconfined", "mountPath: /tmp"]
    {
        assert!(sidecar.contains(needle), "expected {needle:?} in the sidecar Deployment");
    }
    // The app needs no perf-map variable (profcpu switches .NET 8+ on over its diagnostics socket): it is only
    // mentioned, for older runtimes.
    let set = sidecar.lines().any(|l| l.trim_start().starts_with("- name: DOTNET_PerfMapEnabled"));
    assert!(!set && sidecar.contains("DOTNET_PerfMapEnabled=1"), "expected DOTNET_PerfMapEnabled only in a comment");
    let daemonset = std::fs::read_to_string(repo().join("examples/kubernetes/daemonset.yaml")).unwrap();
    for needle in ["hostPID: true", "\"PERFMON\", \"SYS_PTRACE\"", "type: Unconfined"] {
        assert!(daemonset.contains(needle), "expected {needle:?} in the DaemonSet");
    }
}

/// The validator is not a formality: a misspelt field or a wrong type in a copy of the sidecar Deployment fails it.
#[test]
fn a_misspelt_field_or_a_wrong_type_is_rejected() {
    let original = std::fs::read_to_string(repo().join("examples/kubernetes/sidecar-deployment.yaml")).unwrap();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("k8s-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let broken = [
        ("misspelt", original.replace("shareProcessNamespace:", "shareProcessNamespaces:"), "shareProcessNamespaces"),
        ("wrong-type", original.replace("shareProcessNamespace: true", "shareProcessNamespace: \"yes\""), "yes"),
    ];
    for (name, manifest, culprit) in broken {
        assert_ne!(manifest, original, "the {name} edit changed nothing");
        let file = dir.join(format!("{name}.yaml"));
        std::fs::write(&file, manifest).unwrap();
        let out = validate(&[file]);
        let said = text(&out);
        assert!(
            !out.status.success() && said.contains(culprit),
            "expected the {name} copy to be rejected naming {culprit:?}; the validator said ({}):\n{said}",
            out.status
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
