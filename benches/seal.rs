//! Time per seal of a 3 KiB kubeconfig, RSA-4096 (the controller's default) beside
//! RSA-2048, and side by side with upstream Sealed Secrets' own `HybridEncrypt`
//! (pkg/crypto at the version tests/realstack/sealed/go.mod pins, built with the Go on
//! this machine by this bench into target/sealbench): same key, payload and label, one
//! run, rounds alternating between the two so that load from elsewhere on a shared machine
//! falls on both alike. Wall and process CPU time are both reported: on a loaded machine
//! the CPU time is the steadier figure.
//!
//! `cargo bench --bench seal`. Without Go (or if the build fails) the side-by-side part
//! says it was skipped and why.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rsa::pkcs8::{EncodePublicKey, LineEnding};
use rsa::traits::RandomizedEncryptor;
use spokekeeper::seal::{Scope, SealedSecret, SealingKey, SecretInput, hybrid_encrypt};
use time::OffsetDateTime;

const ROUNDS: usize = 15;
const PER_ROUND: usize = 200;

fn kubeconfig_3k() -> Vec<u8> {
    let mut k =
        b"apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority-data: "
            .to_vec();
    while k.len() < 3 * 1024 {
        k.extend_from_slice(
            b"TUlJQmR6Q0NBUjJnQXdJQkFnSUJBREFLQmdncWhrak9QUVFEQWpBak1TRXdId1lEVlFRRERCaHJNM010",
        );
    }
    k.truncate(3 * 1024);
    k
}

/// Median wall time per call over `ROUNDS` rounds of `PER_ROUND` calls.
fn measure(mut f: impl FnMut()) -> Duration {
    medians((0..ROUNDS).map(|_| our_round(&mut f)).collect()).wall
}

/// Median process CPU time per call.
fn measure_cpu(mut f: impl FnMut()) -> Duration {
    medians((0..ROUNDS).map(|_| our_round(&mut f)).collect()).cpu
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Builds upstream's harness (tests/realstack/sealed/sealbench); Err says why not.
fn build_upstream() -> Result<PathBuf, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = root.join("target/sealbench/sealbench");
    let built = Command::new("go")
        .args(["build", "-o"])
        .arg(&out)
        .arg("./sealbench")
        .current_dir(root.join("tests/realstack/sealed"))
        .env("GOFLAGS", "-mod=readonly -trimpath")
        .env("GOTOOLCHAIN", "local")
        .env("CGO_ENABLED", "0")
        .output()
        .map_err(|e| format!("cannot run `go` ({e}); install Go to compare"))?;
    if !built.status.success() {
        return Err(format!(
            "`go build ./sealbench` in tests/realstack/sealed failed: {}",
            String::from_utf8_lossy(&built.stderr).trim()
        ));
    }
    Ok(out)
}

/// Wall and process CPU time per call of one round.
#[derive(Clone, Copy)]
struct PerCall {
    wall: Duration,
    cpu: Duration,
}

fn cpu_now() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// One round of `PER_ROUND` calls of ours.
fn our_round(f: &mut impl FnMut()) -> PerCall {
    let (start, cpu) = (Instant::now(), cpu_now());
    for _ in 0..PER_ROUND {
        f();
    }
    PerCall {
        wall: start.elapsed() / PER_ROUND as u32,
        cpu: (cpu_now() - cpu) / PER_ROUND as u32,
    }
}

/// One round of upstream's HybridEncrypt, in its own process (it warms up first).
fn upstream_round(bin: &Path, dir: &Path, label: &[u8]) -> Result<PerCall, String> {
    let out = Command::new(bin)
        .arg("-key")
        .arg(dir.join("pub.pem"))
        .arg("-payload")
        .arg(dir.join("payload"))
        .arg("-label")
        .arg(String::from_utf8_lossy(label).as_ref())
        .args(["-rounds", "1", "-per", &PER_ROUND.to_string()])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let ns: Vec<u64> = text
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    match ns[..] {
        [wall, cpu] => Ok(PerCall {
            wall: Duration::from_nanos(wall),
            cpu: Duration::from_nanos(cpu),
        }),
        _ => Err(format!("sealbench printed {text:?}, not two times")),
    }
}

/// Medians of wall and of CPU time over the rounds.
fn medians(mut rounds: Vec<PerCall>) -> PerCall {
    let mid = rounds.len() / 2;
    rounds.sort_by_key(|r| r.wall);
    let wall = rounds[mid].wall;
    rounds.sort_by_key(|r| r.cpu);
    PerCall {
        wall,
        cpu: rounds[mid].cpu,
    }
}

/// Ours and upstream's, rounds taken alternately so that load from elsewhere on the
/// machine falls on both alike.
fn side_by_side(
    mut ours: impl FnMut(),
    bin: &Path,
    dir: &Path,
    label: &[u8],
) -> Result<(PerCall, PerCall), String> {
    our_round(&mut ours); // warm-up, as upstream's
    let mut a = Vec::new();
    let mut b = Vec::new();
    for _ in 0..ROUNDS {
        a.push(our_round(&mut ours));
        b.push(upstream_round(bin, dir, label)?);
    }
    Ok((medians(a), medians(b)))
}

fn main() {
    let plaintext = kubeconfig_3k();
    let (namespace, name) = ("flux-system", "dev-kubeconfig");
    let label = Scope::Strict.label(namespace, name);
    let mut input = SecretInput {
        name: name.into(),
        namespace: namespace.into(),
        ..Default::default()
    };
    input.data.insert("value".into(), plaintext.clone().into());
    let upstream = build_upstream();
    let dir = tempfile::tempdir().expect("tempdir");
    // Not a credential: a fake kubeconfig, and a public key.
    std::fs::write(dir.path().join("payload"), &plaintext).expect("payload");

    println!(
        "seal a {} byte payload, label {:?}, median of {ROUNDS} rounds of {PER_ROUND}",
        plaintext.len(),
        String::from_utf8_lossy(&label)
    );
    let mut ours = Vec::new();
    for bits in [4096, 2048] {
        let private = rsa::PrivateKey::new(&mut getrandom::SysRng, bits).expect("keygen");
        let pem = private
            .to_public_key()
            .to_public_key_pem(LineEnding::LF)
            .expect("pem");
        std::fs::write(dir.path().join("pub.pem"), pem.as_bytes()).expect("pem file");
        let key =
            SealingKey::from_pem(pem.as_bytes(), "bench", OffsetDateTime::now_utc()).expect("key");

        let manifest = measure(|| {
            let sealed = SealedSecret::seal(black_box(&input), &key, Scope::Strict).unwrap();
            black_box(sealed.to_yaml());
        });
        let hybrid = || {
            black_box(hybrid_encrypt(&key, black_box(&label), black_box(&plaintext)).unwrap());
        };
        let compared = upstream
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|bin| side_by_side(hybrid, bin, dir.path(), &label));
        let hybrid = match compared {
            Ok((ours, go)) => {
                println!(
                    "  RSA-{bits}: hybrid_encrypt {:>6.1} µs wall, {:>6.1} µs CPU; upstream HybridEncrypt {:>6.1} µs wall, {:>6.1} µs CPU",
                    us(ours.wall),
                    us(ours.cpu),
                    us(go.wall),
                    us(go.cpu)
                );
                println!(
                    "  RSA-{bits}: ratio spokekeeper / upstream: {:.2}x wall, {:.2}x CPU",
                    ours.wall.as_secs_f64() / go.wall.as_secs_f64(),
                    ours.cpu.as_secs_f64() / go.cpu.as_secs_f64()
                );
                ours.wall
            }
            Err(why) => {
                let ours = measure(hybrid);
                println!(
                    "  RSA-{bits}: hybrid_encrypt {:>6.1} µs wall; side-by-side with upstream SKIPPED: {why}",
                    us(ours)
                );
                ours
            }
        };
        // What the RSA part cost before src/seal/oaep.rs: the rsa crate's OAEP encrypt
        // of the 32-byte session key (fixed-window pow over e), beside ours alone.
        let session_key = [7u8; 32];
        let rsa_crate = measure_cpu(|| {
            let oaep = rsa::oaep::EncryptingKey::<sha2::Sha256>::new_with_label(
                key.public_key().clone(),
                label.clone(),
            );
            black_box(
                oaep.encrypt_with_rng(&mut getrandom::SysRng, &session_key)
                    .unwrap(),
            );
        });
        let empty = measure_cpu(|| {
            black_box(hybrid_encrypt(&key, black_box(&label), b"").unwrap());
        });
        println!(
            "  RSA-{bits}: RSA-OAEP of the session key: rsa crate {:>6.1} µs CPU, ours (hybrid_encrypt of nothing) {:>6.1} µs CPU",
            us(rsa_crate),
            us(empty)
        );
        println!(
            "  RSA-{bits}: whole SealedSecret manifest (seal + YAML) {:>7.1} µs ({:.0}/s)",
            us(manifest),
            1.0 / manifest.as_secs_f64()
        );
        ours.push(hybrid);
    }
    println!(
        "  ratio RSA-4096 / RSA-2048 (ours): {:.2}",
        ours[0].as_secs_f64() / ours[1].as_secs_f64()
    );
}
