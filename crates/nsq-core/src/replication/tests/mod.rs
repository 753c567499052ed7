//! Decisions of one [`Member`], event by event (the whole group is checked by the
//! simulation, crates/nsq-core/tests/replication_sim.rs).

use std::time::Duration;

use super::*;

mod set;

const T: Duration = Duration::from_secs(10);

fn s(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn addr(i: u64) -> String {
    format!("10.0.0.{i}:4150")
}

/// Member `me` (node ID) of a group at 10.0.0.1–3, N = 2, no lookupds.
fn member(me: u64, held: Vec<HeldBacklog>) -> Member {
    let cfg = Config::new(me, 2, (1..=3).map(addr).collect(), T);
    Member::new(
        cfg,
        Start {
            epoch: 1,
            held,
            ..Start::default()
        },
    )
}

fn held(origin: u64, epoch: u64, last_seq: u64) -> HeldBacklog {
    HeldBacklog {
        origin,
        epoch,
        last_seq,
        complete: true,
        addr: Some(addr(origin)),
    }
}

fn up(m: &mut Member, at: Duration, peer: u64, link: Link) -> Vec<Command> {
    let addr = addr(peer);
    m.handle(at, Event::LinkUp { peer, addr, link })
}

fn recv(m: &mut Member, at: Duration, from: u64, link: Link, msg: Msg) -> Vec<Command> {
    m.handle(at, Event::Received { from, link, msg })
}

fn has(cmds: &[Command], f: impl Fn(&Command) -> bool) -> bool {
    cmds.iter().any(f)
}

#[test]
fn a_stranger_is_refused_and_nothing_of_it_is_kept() {
    let mut m = member(1, vec![]);
    let c = m.handle(
        s(0),
        Event::LinkUp {
            peer: 77,
            addr: "10.9.9.9:4150".into(),
            link: Link::In,
        },
    );
    assert_eq!(
        c,
        [Command::Refuse {
            peer: 77,
            link: Link::In
        }]
    );
    let c = m.handle(
        s(0),
        Event::LinkUp {
            peer: 0,
            addr: addr(2),
            link: Link::In,
        },
    );
    assert_eq!(
        c,
        [Command::Refuse {
            peer: 0,
            link: Link::In
        }],
        "node ID 0"
    );
    // Its frames are ignored (no session): no WELCOME, no backlog.
    let c = recv(
        &mut m,
        s(0),
        77,
        Link::In,
        Msg::Hello {
            epoch: 1,
            previous_unclean: None,
            stamp: s(0),
        },
    );
    assert!(c.is_empty());
    assert!(m.status_now().is_empty());
}

#[test]
fn an_origin_fences_before_any_peer_can_take_it_over_and_unfences_on_a_members_word() {
    // Origin 1 with peer 2.
    let mut o = member(1, vec![]);
    up(&mut o, s(0), 2, Link::Out);
    recv(
        &mut o,
        s(0),
        2,
        Link::Out,
        Msg::Welcome {
            epoch: 1,
            resume: None,
            echo: s(0),
        },
    );
    // Holder 2 of origin 1's epoch 1: the link from 1 goes down at 0.
    let mut p = member(2, vec![held(1, 1, 5)]);
    p.handle(s(0), Event::Tick);
    let mut fenced_at = None;
    let mut taken_at = None;
    for ms in (0..=20_000).step_by(100) {
        let now = Duration::from_millis(ms);
        if o.handle(now, Event::Tick).contains(&Command::Fence) {
            fenced_at.get_or_insert(now);
        }
        let c = p.handle(now, Event::Tick);
        if has(&c, |c| matches!(c, Command::StartTakeover { .. })) {
            taken_at.get_or_insert(now);
        }
    }
    let (fenced_at, taken_at) = (fenced_at.unwrap(), taken_at.unwrap());
    assert_eq!(fenced_at, T / 2, "silent for F = T/2");
    assert!(taken_at >= T && fenced_at < taken_at);
    // A member's STATUS saying it replicates epoch 1 with a fresh echo unfences.
    let entry = StatusEntry {
        origin: 1,
        epoch: 1,
        state: BacklogState::Replicating,
        last_seq: 5,
        complete: true,
        echo: s(19),
    };
    let c = recv(&mut o, s(20), 2, Link::Out, Msg::Status(vec![entry]));
    assert!(c.contains(&Command::Unfence));
    // A live member saying it takes epoch 1 over fences at once.
    let entry = StatusEntry {
        state: BacklogState::TakingOver,
        ..entry
    };
    let c = recv(&mut o, s(20), 2, Link::Out, Msg::Status(vec![entry]));
    assert!(c.contains(&Command::Fence));
}

#[test]
fn a_new_node_id_at_a_known_address_ends_the_old_identity_at_once() {
    // Member 2 holds origin 1's epoch 1 (1 at 10.0.0.1).
    let mut p = member(2, vec![held(1, 1, 5)]);
    up(&mut p, s(0), 1, Link::In);
    // 10.0.0.1 comes back with a wiped disk: node ID 11.
    let c = p.handle(
        s(1),
        Event::LinkUp {
            peer: 11,
            addr: addr(1),
            link: Link::In,
        },
    );
    assert!(!has(&c, |c| matches!(c, Command::Refuse { .. })));
    // Not T later: as soon as the new node's first STATUS says it holds no copy.
    p.handle(s(1), Event::Tick);
    recv(&mut p, s(2), 11, Link::In, Msg::Status(vec![]));
    let c = p.handle(s(2), Event::Tick);
    assert!(c.contains(&Command::StartTakeover {
        origin: 1,
        epoch: 1
    }));
    // The old ID may not link again.
    let c = up(&mut p, s(3), 1, Link::In);
    assert!(c.contains(&Command::Refuse {
        peer: 1,
        link: Link::In
    }));
}

#[test]
fn a_handoff_is_dropped_only_once_the_taker_stored_all_of_it() {
    // Member 2 holds origin 1's epoch 1; member 3 (linked) takes it over.
    let mut p = member(2, vec![held(1, 1, 5)]);
    up(&mut p, s(0), 3, Link::Out);
    let taking = StatusEntry {
        origin: 1,
        epoch: 1,
        state: BacklogState::TakingOver,
        last_seq: 4,
        complete: false,
        echo: s(0),
    };
    recv(&mut p, s(0), 3, Link::Out, Msg::Status(vec![taking]));
    let c = p.handle(s(0), Event::Tick);
    assert!(c.contains(&Command::SendHandoff {
        to: 3,
        origin: 1,
        epoch: 1
    }));
    // More of the epoch arrived after the copy went out (seq 6).
    p.handle(
        s(1),
        Event::Stored {
            origin: 1,
            epoch: 1,
            last_seq: 6,
            complete: true,
        },
    );
    let done = Msg::HandoffDone {
        origin: 1,
        epoch: 1,
    };
    let c = recv(&mut p, s(1), 3, Link::Out, done.clone());
    assert!(!has(&c, |c| matches!(c, Command::DropBacklog { .. })));
    let c = p.handle(s(1), Event::Tick);
    assert!(c.contains(&Command::SendHandoff {
        to: 3,
        origin: 1,
        epoch: 1
    }));
    let c = recv(&mut p, s(2), 3, Link::Out, done);
    assert!(c.contains(&Command::DropBacklog {
        origin: 1,
        epoch: 1
    }));
}

#[test]
fn a_manifest_is_applied_once() {
    let mut o = member(1, vec![]);
    up(&mut o, s(0), 2, Link::Out);
    let taken = Msg::TakenOver {
        epoch: 1,
        last_seq: 9,
    };
    let c = recv(&mut o, s(0), 2, Link::Out, taken.clone());
    assert!(c.contains(&Command::ApplyManifest {
        taker: 2,
        epoch: 1,
        last_seq: 9
    }));
    let c = o.handle(s(0), Event::ManifestApplied { taker: 2, epoch: 1 });
    assert!(c.contains(&Command::NewEpoch { epoch: 2 }));
    // The taker missed MANIFEST_APPLIED and says TAKEN_OVER again on the next session.
    up(&mut o, s(1), 2, Link::Out);
    let c = recv(&mut o, s(1), 2, Link::Out, taken);
    assert!(!has(&c, |c| matches!(c, Command::ApplyManifest { .. })));
    assert!(c.contains(&Command::Send {
        to: 2,
        link: Link::Out,
        msg: Msg::ManifestApplied { epoch: 1 }
    }));
}

fn status(origin: u64, epoch: u64, state: BacklogState) -> Msg {
    Msg::Status(vec![StatusEntry {
        origin,
        epoch,
        state,
        last_seq: 5,
        complete: true,
        echo: s(0),
    }])
}

fn hello(epoch: u64) -> Msg {
    Msg::Hello {
        epoch,
        previous_unclean: None,
        stamp: s(0),
    }
}

fn welcomes(cmds: &[Command], e: u64) -> bool {
    has(
        cmds,
        |c| matches!(c, Command::Send { msg: Msg::Welcome { epoch, .. }, .. } if *epoch == e),
    )
}

#[test]
fn an_older_epoch_taken_over_elsewhere_does_not_hold_up_the_origins_next_one() {
    // Holder 2 keeps a copy of (1, 1), which 3 took over; 1 returns with epoch 2 (its
    // takeover needs acknowledgements from 2: seed 7002635 waited on each other forever).
    let mut m = member(2, vec![held(1, 1, 5)]);
    up(&mut m, s(0), 3, Link::In);
    recv(
        &mut m,
        s(0),
        3,
        Link::In,
        status(1, 1, BacklogState::TakenOver),
    );
    up(&mut m, s(1), 1, Link::In);
    let c = recv(&mut m, s(1), 1, Link::In, hello(2));
    assert!(welcomes(&c, 2), "{c:?}");
}

#[test]
fn a_copy_dropped_to_a_wiped_taker_is_taken_over_here() {
    // 1's DROP named taker 3, whose identity then ended (wiped) before 2 handed its copy off
    // (seed 7000189: the copy waited for 3 forever, and what only it held was lost).
    let mut m = member(2, vec![held(1, 1, 5)]);
    up(&mut m, s(0), 1, Link::In);
    recv(&mut m, s(0), 1, Link::In, Msg::Drop { epoch: 1, taker: 3 });
    m.handle(s(0), Event::IdentityEnded { old: 3 });
    let mut took = false;
    for t in 1..60 {
        recv(&mut m, s(t), 1, Link::In, Msg::Status(vec![]));
        let c = m.handle(s(t), Event::Tick);
        took |= has(&c, |c| {
            matches!(
                c,
                Command::StartTakeover {
                    origin: 1,
                    epoch: 1
                }
            )
        });
    }
    assert!(took);
}
#[test]
fn a_dead_takers_taken_over_does_not_keep_the_origin_unwelcomed() {
    // 3 took (1, 1) over and died for good before 1 applied its manifest (seed 7001062: 1
    // stayed fenced, never welcomed).
    let mut m = member(2, vec![]);
    up(&mut m, s(0), 3, Link::In);
    recv(
        &mut m,
        s(0),
        3,
        Link::In,
        status(1, 1, BacklogState::TakenOver),
    );
    m.handle(
        s(1),
        Event::LinkDown {
            peer: 3,
            link: Link::In,
        },
    );
    up(&mut m, s(2), 1, Link::In);
    let c = recv(&mut m, s(2), 1, Link::In, hello(1));
    assert!(welcomes(&c, 1), "{c:?}");
}

#[test]
fn an_origin_leaves_an_epoch_a_member_takes_over_and_stays_fenced_until_its_manifest() {
    // Origin 1, welcomed by 2 in epoch 1; 2 then says it takes epoch 1 over (1 was cut off,
    // say). 1 moves on to epoch 2 at once and delivers nothing until the manifest of epoch 1
    // is applied (before, it stayed in epoch 1, was welcomed back, and both delivered).
    let mut o = member(1, vec![]);
    up(&mut o, s(0), 2, Link::Out);
    up(&mut o, s(0), 2, Link::In);
    let welcome = |epoch, at| Msg::Welcome {
        epoch,
        resume: None,
        echo: at,
    };
    recv(&mut o, s(0), 2, Link::Out, welcome(1, s(0)));
    let c = recv(
        &mut o,
        s(1),
        2,
        Link::In,
        status(1, 1, BacklogState::TakingOver),
    );
    assert!(c.contains(&Command::NewEpoch { epoch: 2 }), "{c:?}");
    assert!(c.contains(&Command::Close {
        peer: 2,
        link: Link::Out
    }));
    assert!(c.contains(&Command::Fence));
    assert_eq!(o.epoch(), 2);
    // The next session says epoch 2; welcomed, still fenced while 2 takes epoch 1 over.
    let c = up(&mut o, s(1), 2, Link::Out);
    assert!(has(&c, |c| matches!(
        c,
        Command::Send {
            msg: Msg::Hello { epoch: 2, .. },
            ..
        }
    )));
    recv(&mut o, s(1), 2, Link::Out, welcome(2, s(1)));
    for t in 2..8 {
        o.handle(s(t), Event::Tick);
        assert!(o.is_fenced(), "at {t} s");
    }
    // TAKEN_OVER arrives on the session (and `taken over` in STATUS): fenced until applied.
    let c = recv(
        &mut o,
        s(8),
        2,
        Link::Out,
        Msg::TakenOver {
            epoch: 1,
            last_seq: 5,
        },
    );
    assert!(c.contains(&Command::ApplyManifest {
        taker: 2,
        epoch: 1,
        last_seq: 5
    }));
    recv(
        &mut o,
        s(8),
        2,
        Link::In,
        status(1, 1, BacklogState::TakenOver),
    );
    recv(&mut o, s(8), 2, Link::Out, Msg::Pong { stamp: s(8) });
    assert!(o.is_fenced());
    let c = o.handle(s(8), Event::ManifestApplied { taker: 2, epoch: 1 });
    assert!(c.contains(&Command::Unfence), "{c:?}");
    assert!(!has(&c, |c| matches!(c, Command::NewEpoch { .. })));
    assert_eq!(o.epoch(), 2);
}

#[test]
fn a_taker_welcomes_its_origin_only_into_a_later_epoch_and_tells_it_when_done() {
    // Holder 2 takes (1, 1) over after T without 1. 1 comes back in epoch 1: not welcomed
    // (seed 1000147's kind: the welcome stopped the takeover and both delivered); in epoch 2:
    // welcomed while the takeover runs (its adoptions may need 1's acknowledgements), and
    // TAKEN_OVER follows on that session once it is done.
    let mut m = member(2, vec![held(1, 1, 5)]);
    m.handle(s(0), Event::Tick);
    let mut took = false;
    for t in 1..=12 {
        let c = m.handle(s(t), Event::Tick);
        took |= c.contains(&Command::StartTakeover {
            origin: 1,
            epoch: 1,
        });
    }
    assert!(took);
    let c = up(&mut m, s(13), 1, Link::In);
    assert!(has(&c, |c| matches!(
        c,
        Command::Send { msg: Msg::Status(e), .. }
            if e.iter().any(|e| (e.origin, e.epoch, e.state) == (1, 1, BacklogState::TakingOver))
    )));
    let c = recv(&mut m, s(13), 1, Link::In, hello(1));
    assert!(!welcomes(&c, 1), "{c:?}");
    let c = m.handle(s(13), Event::Tick);
    assert!(!welcomes(&c, 1), "{c:?}");
    m.handle(
        s(13),
        Event::LinkDown {
            peer: 1,
            link: Link::In,
        },
    );
    up(&mut m, s(13), 1, Link::In);
    let c = recv(&mut m, s(13), 1, Link::In, hello(2));
    assert!(welcomes(&c, 2), "{c:?}");
    let c = m.handle(
        s(14),
        Event::TakeoverEnded {
            origin: 1,
            epoch: 1,
            ok: true,
        },
    );
    assert!(c.contains(&Command::Send {
        to: 1,
        link: Link::In,
        msg: Msg::TakenOver {
            epoch: 1,
            last_seq: 5
        }
    }));
    assert!(c.contains(&Command::SendManifest {
        origin: 1,
        epoch: 1
    }));
}

#[test]
fn a_claim_keeps_the_origin_fenced_for_the_link_timeout_after_the_claimants_session_ends() {
    // 2 says it takes 1's epoch over, then its session ends: 1 does not deliver for the link
    // timeout, as 2 may be delivering what it took (1's next session usually hears of the
    // takeover again, or gets its manifest). As nsqd runs it: the origin stays in the epoch.
    let mut cfg = Config::new(1, 2, (1..=3).map(addr).collect(), T);
    cfg.leave_claimed_epoch = false;
    let mut o = Member::new(
        cfg,
        Start {
            epoch: 1,
            ..Start::default()
        },
    );
    up(&mut o, s(0), 2, Link::Out);
    recv(
        &mut o,
        s(0),
        2,
        Link::Out,
        Msg::Welcome {
            epoch: 1,
            resume: None,
            echo: s(0),
        },
    );
    let c = recv(
        &mut o,
        s(1),
        2,
        Link::Out,
        status(1, 1, BacklogState::TakingOver),
    );
    assert!(c.contains(&Command::Fence));
    o.handle(
        s(1),
        Event::LinkDown {
            peer: 2,
            link: Link::Out,
        },
    );
    up(&mut o, s(1), 2, Link::Out);
    recv(
        &mut o,
        s(1),
        2,
        Link::Out,
        Msg::Welcome {
            epoch: 1,
            resume: None,
            echo: s(1),
        },
    );
    // Its new STATUS lists nothing of 1 (say its takeover failed): the grace still holds.
    recv(&mut o, s(1), 2, Link::Out, Msg::Status(vec![]));
    for ms in (1000..6000).step_by(100) {
        let c = o.handle(Duration::from_millis(ms), Event::Tick);
        assert!(!c.contains(&Command::Unfence), "at {ms} ms");
    }
    let c = recv(&mut o, s(6), 2, Link::Out, Msg::Pong { stamp: s(6) });
    assert!(c.contains(&Command::Unfence), "{c:?}");
}

#[test]
fn a_stale_hello_of_an_epoch_taken_over_here_is_not_welcomed() {
    // Member 2 took origin 1's epoch 1 over; 1 applied the manifest. A HELLO of epoch 1 sent
    // before 1 moved on arrives late: welcoming it would start a new copy of an epoch whose
    // messages 2 now delivers.
    let mut m = Member::new(
        Config::new(2, 2, (1..=3).map(addr).collect(), T),
        Start {
            epoch: 1,
            manifests: vec![(1, 1, 5)],
            ..Start::default()
        },
    );
    up(&mut m, s(0), 1, Link::In);
    let c = recv(&mut m, s(0), 1, Link::In, hello(1));
    assert!(c.contains(&Command::SendManifest {
        origin: 1,
        epoch: 1
    }));
    let c = recv(&mut m, s(1), 1, Link::In, Msg::ManifestApplied { epoch: 1 });
    assert!(c.contains(&Command::DeleteManifest {
        origin: 1,
        epoch: 1
    }));
    assert!(!welcomes(&c, 1), "{c:?}");
    let c = m.handle(s(2), Event::Tick);
    assert!(!welcomes(&c, 1), "{c:?}");
    // Its next epoch is.
    up(&mut m, s(3), 1, Link::In);
    let c = recv(&mut m, s(3), 1, Link::In, hello(2));
    assert!(welcomes(&c, 2), "{c:?}");
}

#[test]
fn a_manifest_of_an_ended_identity_is_deleted_it_is_never_applied() {
    // Member 2 took origin 1's epoch 1 over and keeps its manifest; 10.0.0.1 comes back
    // with a wiped disk (node ID 11): 1 will never apply it.
    let mut m = Member::new(
        Config::new(2, 2, (1..=3).map(addr).collect(), T),
        Start {
            epoch: 1,
            manifests: vec![(1, 1, 5)],
            held: vec![held(1, 2, 3)],
            ..Start::default()
        },
    );
    up(&mut m, s(0), 1, Link::In);
    let c = m.handle(
        s(1),
        Event::LinkUp {
            peer: 11,
            addr: addr(1),
            link: Link::In,
        },
    );
    assert!(c.contains(&Command::DeleteManifest {
        origin: 1,
        epoch: 1
    }));
    // Its epoch 2, held here, is taken over; that manifest goes at once too.
    m.handle(
        s(1),
        Event::LinkDown {
            peer: 1,
            link: Link::In,
        },
    );
    m.handle(s(1), Event::Tick);
    recv(&mut m, s(2), 11, Link::In, Msg::Status(vec![]));
    let c = m.handle(s(2), Event::Tick);
    assert!(c.contains(&Command::StartTakeover {
        origin: 1,
        epoch: 2
    }));
    let c = m.handle(
        s(3),
        Event::TakeoverEnded {
            origin: 1,
            epoch: 2,
            ok: true,
        },
    );
    assert!(c.contains(&Command::DeleteManifest {
        origin: 1,
        epoch: 2
    }));
    // Both still announced as taken over (other holders must not take them over again).
    let taken: Vec<(u64, u64)> = m
        .status_now()
        .iter()
        .filter(|e| e.state == BacklogState::TakenOver)
        .map(|e| (e.origin, e.epoch))
        .collect();
    assert_eq!(taken, [(1, 1), (1, 2)]);
}

#[test]
fn a_changed_lookupd_list_starts_the_gone_rule_again() {
    // Member 2 holds origin 1's epoch 1; two lookupds configured, one never answers: 1 is
    // never gone. The list changes to the one that answers: gone T after the change.
    let mut cfg = Config::new(2, 2, (1..=3).map(addr).collect(), T);
    cfg.lookupds = 2;
    let mut m = Member::new(
        cfg,
        Start {
            epoch: 1,
            held: vec![held(1, 1, 5)],
            ..Start::default()
        },
    );
    let answer = |at: Duration| Event::LookupdAnswer {
        lookupd: 0,
        clock: at,
        producers: vec![],
    };
    let started = |m: &mut Member, from: u64, to: u64| {
        (from..to).any(|t| {
            m.handle(s(t), answer(s(t)));
            m.handle(s(t), Event::Tick)
                .contains(&Command::StartTakeover {
                    origin: 1,
                    epoch: 1,
                })
        })
    };
    assert!(!started(&mut m, 0, 30), "one lookupd never answers");
    m.handle(s(30), Event::LookupdsChanged { count: 1 });
    assert!(!started(&mut m, 30, 39), "gone only T after the change");
    assert!(started(&mut m, 39, 45));
}
