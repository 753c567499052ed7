//! Only the replica set stores, and a planned leave (issue 29).

use super::*;

#[test]
fn only_the_replica_set_is_streamed_to_and_the_others_drop_their_copies() {
    // Origin 1, N = 2: peers 2 and 3 both link; only the first welcomed gets the log.
    let mut o = member(1, vec![]);
    up(&mut o, s(0), 2, Link::Out);
    up(&mut o, s(0), 3, Link::Out);
    let welcome = |resume| Msg::Welcome {
        epoch: 1,
        resume,
        echo: s(0),
    };
    let c = recv(&mut o, s(0), 3, Link::Out, welcome(None));
    assert!(has(&c, |c| matches!(c, Command::StartCatchup { peer: 3 })));
    let c = recv(&mut o, s(0), 2, Link::Out, welcome(None));
    assert!(
        !has(&c, |c| matches!(
            c,
            Command::StartCatchup { .. } | Command::Resume { .. }
        )),
        "2 is outside the set: no log"
    );
    assert!(
        !has(&c, |c| matches!(
            c,
            Command::Send {
                msg: Msg::Standby { .. },
                ..
            }
        )),
        "not before 3's catch-up ended"
    );
    let c = recv(&mut o, s(1), 3, Link::Out, Msg::Ack { seq: 0 });
    assert!(has(&c, |c| matches!(
        c,
        Command::Send {
            to: 2,
            link: Link::Out,
            msg: Msg::Standby { epoch: 1 }
        }
    )));
    // 3 goes: 2 joins the set with a catch-up.
    let c = o.handle(
        s(2),
        Event::LinkDown {
            peer: 3,
            link: Link::Out,
        },
    );
    assert!(has(&c, |c| matches!(c, Command::StartCatchup { peer: 2 })));
    assert!(o.group().peer(2).is_some_and(|p| p.in_set && p.catching_up));

    // The holder's side: 2 told STANDBY forgets its copy, and a catch-up makes a new one.
    let mut h = member(2, vec![]);
    up(&mut h, s(0), 1, Link::In);
    let c = recv(&mut h, s(0), 1, Link::In, hello(1));
    assert!(welcomes(&c, 1));
    let stored = |last_seq, complete| Event::Stored {
        origin: 1,
        epoch: 1,
        last_seq,
        complete,
    };
    h.handle(s(0), stored(4, true));
    assert!(h.status_now().iter().any(|e| e.origin == 1));
    recv(&mut h, s(1), 1, Link::In, Msg::Standby { epoch: 1 });
    assert!(
        !h.status_now().iter().any(|e| e.origin == 1),
        "no copy of origin 1 is announced"
    );
    let c = h.handle(s(2), stored(9, false));
    assert!(!has(&c, |c| matches!(
        c,
        Command::Send {
            msg: Msg::Ack { .. },
            ..
        }
    )));
    let c = h.handle(s(2), stored(9, true));
    assert!(has(&c, |c| matches!(
        c,
        Command::Send {
            msg: Msg::Ack { seq: 9 },
            ..
        }
    )));
    assert!(h
        .status_now()
        .iter()
        .any(|e| e.origin == 1 && e.complete && e.last_seq == 9));
}

#[test]
fn a_planned_leave_fences_and_moves_on_once_the_set_holds_the_whole_log() {
    let mut o = member(1, vec![]);
    up(&mut o, s(0), 3, Link::Out);
    let welcome = Msg::Welcome {
        epoch: 1,
        resume: None,
        echo: s(0),
    };
    recv(&mut o, s(0), 3, Link::Out, welcome);
    recv(&mut o, s(0), 3, Link::Out, Msg::Ack { seq: 0 });
    for seq in 1..=5 {
        o.handle(s(1), Event::Published { seq });
    }
    recv(&mut o, s(1), 3, Link::Out, Msg::Ack { seq: 4 });
    let c = o.handle(s(1), Event::Leave { seq: 5 });
    assert!(has(&c, |c| matches!(c, Command::Fence)), "{c:?}");
    assert!(
        !has(&c, |c| matches!(c, Command::NewEpoch { .. })),
        "seq 5 is not in the set yet"
    );
    let c = recv(&mut o, s(2), 3, Link::Out, Msg::Ack { seq: 5 });
    assert!(
        has(&c, |c| matches!(c, Command::NewEpoch { epoch: 2 })),
        "{c:?}"
    );
    assert!(has(&c, |c| matches!(
        c,
        Command::Close {
            peer: 3,
            link: Link::Out
        }
    )));
    assert_eq!(o.epoch(), 2);
    // Fenced for good: a member's proof does not unfence a leaving node.
    up(&mut o, s(3), 3, Link::Out);
    let welcome2 = Msg::Welcome {
        epoch: 2,
        resume: None,
        echo: s(3),
    };
    let c = recv(&mut o, s(3), 3, Link::Out, welcome2);
    assert!(!has(&c, |c| matches!(c, Command::Unfence)));
    assert!(o.is_fenced());
}
