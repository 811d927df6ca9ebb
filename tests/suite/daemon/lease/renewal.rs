//! Renewal as a contender sees it: expiry counted from its own clock, failed renewals retried, a conflict read again.

use super::*;

/// Issue 19, item 6: expiry is judged by when this replica saw the record change, on its
/// own monotonic clock, whatever the holder's renewTime says (its clock may be skewed).
#[test]
fn expiry_ignores_the_holders_renew_time() {
    let emu = Emulator::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (_eb, b) = contender(&emu, "skew", "b", Duration::from_secs(2));
    // A live holder whose clock is 10 minutes behind: not expired to us.
    emu.set_holder(
        "skew",
        "behind",
        SystemTime::now() - Duration::from_secs(600),
        2,
    );
    assert!(
        matches!(rt.block_on(b.try_acquire_or_renew()).unwrap(), Observed::Held { ref holder, .. } if holder == "behind")
    );
    // It renews (a new record): held again for a whole lease duration from now.
    std::thread::sleep(Duration::from_millis(1500));
    emu.set_holder(
        "skew",
        "behind",
        SystemTime::now() - Duration::from_secs(600),
        2,
    );
    std::thread::sleep(Duration::from_millis(1000));
    assert!(matches!(
        rt.block_on(b.try_acquire_or_renew()).unwrap(),
        Observed::Held { .. }
    ));
    // A dead holder whose clock was an hour ahead: taken once the record stood still
    // for its lease duration.
    emu.set_holder(
        "skew",
        "ahead",
        SystemTime::now() + Duration::from_secs(3600),
        2,
    );
    assert!(matches!(
        rt.block_on(b.try_acquire_or_renew()).unwrap(),
        Observed::Held { .. }
    ));
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(
        rt.block_on(b.try_acquire_or_renew()).unwrap(),
        Observed::Leader
    );
    assert_eq!(emu.holder("skew").as_deref(), Some("b"));
}

/// Issue 19, item 7 (emulated: the real API server answers 500 or a bare 409 on no
/// cue): a failed renewal is retried within the deadline, and a 409 that shows no other
/// holder is read again; neither steps the leader down.
#[test]
fn failed_renewals_are_retried_and_a_conflict_is_read_again_while_leading() {
    let timing = Timing {
        lease_duration: Duration::from_secs(6),
        renew_every: Duration::from_secs(2),
        renew_deadline: Duration::from_secs(4),
        retry_every: Duration::from_millis(500),
    };
    let emu = Emulator::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (_ea, a) = contender(&emu, "retry", "a", timing.lease_duration);
    let (_eb, b) = contender(&emu, "retry", "b", timing.lease_duration);
    let (ta, ra) = watch::channel(false);
    let (tb, rb) = watch::channel(false);
    let watcher = Watcher::start(ra, rb);
    let task_a = rt.spawn(lease::elect(Arc::new(a), timing, ta));
    assert!(watcher.wait(Duration::from_secs(2), |a, _| a), "a leads");
    let task_b = rt.spawn(lease::elect(Arc::new(b), timing, tb));
    let leading = Instant::now();
    let writes = |emu: &Emulator| emu.writes("retry").len();

    // Two failed renewals in a row: the third attempt, 1 s after the first, succeeds.
    std::thread::sleep(Duration::from_millis(500));
    emu.shared
        .put_faults
        .lock()
        .unwrap()
        .extend([StatusCode::INTERNAL_SERVER_ERROR; 2]);
    let before = writes(&emu);
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        emu.shared.put_faults.lock().unwrap().is_empty(),
        "both faults were hit"
    );
    assert!(writes(&emu) > before, "renewed after the failures");

    // A conflict from a metadata-only write: re-read and renewed, still leading.
    emu.shared
        .put_faults
        .lock()
        .unwrap()
        .push(StatusCode::CONFLICT);
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        emu.shared.put_faults.lock().unwrap().is_empty(),
        "the conflict was hit"
    );
    assert_eq!(emu.holder("retry").as_deref(), Some("a"));
    let s = watcher.samples.lock().unwrap();
    let after: Vec<_> = s.iter().filter(|(t, _, _)| *t >= leading).collect();
    assert!(after.len() > 1000, "sampled {} times", after.len());
    assert!(
        after.iter().all(|(_, a, b)| *a && !*b),
        "a stepped down, or b led"
    );
    drop(s);
    task_a.abort();
    task_b.abort();
    rt.shutdown_background();
}
