use serde_json::Value;
use time::macros::datetime;

use super::*;

const V137: Version = Version {
    major: 1,
    minor: 37,
};

#[test]
fn the_dropped_file_trusts_no_issuer_and_keeps_each_distributions_anonymous_block() {
    let at = datetime!(2026-12-07 21:40:05.123 UTC);
    for (distro, enabled) in [
        (Distro::K3s, false),
        (Distro::Rke2, false),
        (Distro::Kubeadm, true),
    ] {
        let text = render(distro, V137, at).unwrap();
        assert!(
            text.starts_with("# spokekeeper-issuer-dropped: 2026-12-07T21:40:05Z\n"),
            "{text}"
        );
        let doc: Value = serde_saphyr::from_str(&text).expect("YAML");
        assert_eq!(doc["apiVersion"], "apiserver.config.k8s.io/v1");
        assert_eq!(doc["kind"], "AuthenticationConfiguration");
        assert_eq!(doc["jwt"], Value::Array(vec![]), "{text}");
        assert_eq!(doc["anonymous"]["enabled"], enabled, "{distro}: {text}");
        let first = text.lines().next().unwrap();
        assert_eq!(
            parse(first.as_bytes()),
            Ok(Some(Dropped {
                at: datetime!(2026-12-07 21:40:05 UTC)
            }))
        );
    }
    let kubeadm: Value =
        serde_saphyr::from_str(&render(Distro::Kubeadm, V137, at).unwrap()).unwrap();
    assert_eq!(kubeadm["anonymous"]["conditions"][0]["path"], "/livez");
}

#[test]
fn older_spokes_get_their_api_version_and_no_anonymous_block_before_it_exists() {
    let at = datetime!(2026-01-02 03:04:05 UTC);
    let v = |minor| Version { major: 1, minor };
    let v131 = render(Distro::K3s, v(31), at).unwrap();
    assert!(v131.contains("apiserver.config.k8s.io/v1beta1\n"), "{v131}");
    assert!(!v131.contains("anonymous"), "{v131}");
    assert!(
        render(Distro::K3s, v(32), at)
            .unwrap()
            .contains("anonymous:\n  enabled: false\n")
    );
    assert_eq!(
        render(Distro::K3s, v(29), at),
        Err(TooOld {
            major: 1,
            minor: 29
        })
    );
}

#[test]
fn a_first_line_that_is_not_the_marker_is_no_drop() {
    for line in [
        &b""[..],
        b"# Written by spokekeeper: this API server trusts the hub's ServiceAccount tokens for\n",
        b"apiVersion: apiserver.config.k8s.io/v1\n",
        b"\xff\xfe not utf-8\n",
        b" # spokekeeper-issuer-dropped: 2026-12-07T21:40:05Z\n",
    ] {
        assert_eq!(parse(line), Ok(None), "{line:?}");
    }
    assert_eq!(
        parse(b"# spokekeeper-issuer-dropped: 2026-12-07T21:40:05Z"),
        Ok(Some(Dropped {
            at: datetime!(2026-12-07 21:40:05 UTC)
        }))
    );
}

#[test]
fn a_marker_with_anything_but_its_exact_time_is_refused_not_guessed() {
    for rest in [
        "",
        "2026-12-07T21:40:05+01:00",
        "2026-12-07T21:40:05.5Z",
        "2026-12-07t21:40:05z",
        "2026-12-07T21:40:05Z ",
        " 2026-12-07T21:40:05Z",
        "2026-13-07T21:40:05Z",
        "2026-12-07T21:40:05Z\r",
        "yesterday",
    ] {
        let line = format!("{MARKER}{rest}\n");
        let err = parse(line.as_bytes()).expect_err(rest);
        assert!(err.why.contains("is not YYYY-MM-DDTHH:MM:SSZ"), "{err}");
    }
    let mut bad = MARKER.as_bytes().to_vec();
    bad.extend_from_slice(b"\xff2026\n");
    assert!(parse(&bad).unwrap_err().why.contains("not UTF-8"));
    // More than the script prints is not the script's answer, whatever it starts with.
    let long = format!("{MARKER}{}\n", "x".repeat(MAX_HEADER));
    let err = parse(long.as_bytes()).unwrap_err();
    assert!(err.why.contains("more than the script's 256"), "{err}");
    // An error quotes at most a short, one-line excerpt of what the node printed.
    let hostile = format!("{MARKER}{}", "\u{1b}[2J\nline".repeat(40));
    let err = parse(&hostile.as_bytes()[..MAX_HEADER]).unwrap_err();
    assert!(!err.why.contains('\n') && err.why.len() < 120, "{err}");
}
