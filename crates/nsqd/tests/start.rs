//! Start-up failures of an in-process nsqd carry the reference's texts (nsqd/nsqd.go, New):
//! a data path already locked by another instance, a TCP address already in use, and an
//! unparsable `nsqd.dat`.

mod common;

use nsqd::options::NsqdOptions;

fn opts(data_path: &std::path::Path, tcp: &str) -> NsqdOptions {
    common::options(data_path, &[format!("--tcp-address={tcp}")])
}

#[tokio::test]
async fn second_instance_on_same_data_path_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let first = nsqd::start(opts(dir.path(), "127.0.0.1:0")).await.unwrap();
    let Err(e) = nsqd::start(opts(dir.path(), "127.0.0.1:0")).await else {
        panic!("second nsqd started on a locked data path")
    };
    let text = e.to_string();
    let prefix = format!(
        "failed to lock data-path: cannot flock directory {} - ",
        dir.path().display()
    );
    assert!(text.starts_with(&prefix), "{text}");
    assert!(
        text.ends_with(" (possibly in use by another instance of nsqd)"),
        "{text}"
    );
    first.shutdown().await;
}

#[tokio::test]
async fn busy_tcp_address_is_reported_like_go() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let Err(e) = nsqd::start(opts(dir.path(), &addr)).await else {
        panic!("nsqd bound a busy address")
    };
    let text = e.to_string();
    assert!(
        text.starts_with(&format!("listen ({addr}) failed - ")),
        "{text}"
    );
}

#[tokio::test]
async fn unparsable_metadata_is_fatal_with_go_text() {
    let dir = tempfile::tempdir().unwrap();
    let dat = dir.path().join("nsqd.dat");
    std::fs::write(&dat, b"not json").unwrap();
    let Err(e) = nsqd::start(opts(dir.path(), "127.0.0.1:0")).await else {
        panic!("nsqd started with a corrupt nsqd.dat")
    };
    let text = e.to_string();
    let prefix = format!(
        "failed to load metadata - failed to parse metadata in {} - ",
        dat.display()
    );
    assert!(text.starts_with(&prefix), "{text}");
}
