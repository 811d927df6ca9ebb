//! Time per seal of a 3 KiB kubeconfig, RSA-4096 (the controller's default) beside
//! RSA-2048, measured in one run so the ratio is fair on a noisy machine.
//!
//! `cargo bench --bench seal`

use std::hint::black_box;
use std::time::{Duration, Instant};

use rsa::pkcs8::{EncodePublicKey, LineEnding};
use spokekeeper::seal::{Scope, SealedSecret, SealingKey, SecretInput};
use time::OffsetDateTime;

fn sealing_key(bits: usize) -> SealingKey {
    let private = rsa::PrivateKey::new(&mut getrandom::SysRng, bits).expect("keygen");
    let pem = private
        .to_public_key()
        .to_public_key_pem(LineEnding::LF)
        .expect("pem");
    SealingKey::from_pem(pem.as_bytes(), "bench", OffsetDateTime::now_utc()).expect("key")
}

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

/// Median time per call over `rounds` rounds of `per_round` calls.
fn measure(rounds: usize, per_round: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..per_round {
                f();
            }
            start.elapsed() / per_round as u32
        })
        .collect();
    times.sort();
    times[rounds / 2]
}

fn main() {
    let plaintext = kubeconfig_3k();
    let mut input = SecretInput {
        name: "dev-kubeconfig".into(),
        namespace: "flux-system".into(),
        ..Default::default()
    };
    input.data.insert("value".into(), plaintext.clone().into());
    println!(
        "seal a {} byte kubeconfig into a SealedSecret manifest (strict scope), median of 15 rounds",
        plaintext.len()
    );
    let mut results = Vec::new();
    for bits in [4096, 2048] {
        let key = sealing_key(bits);
        let per = measure(15, 200, || {
            let sealed = SealedSecret::seal(black_box(&input), &key, Scope::Strict).unwrap();
            black_box(sealed.to_yaml());
        });
        println!(
            "  RSA-{bits}: {:>8.1} µs per seal ({:.0} seals/s)",
            per.as_secs_f64() * 1e6,
            1.0 / per.as_secs_f64()
        );
        results.push(per);
    }
    println!(
        "  ratio RSA-4096 / RSA-2048: {:.2}",
        results[0].as_secs_f64() / results[1].as_secs_f64()
    );
}
