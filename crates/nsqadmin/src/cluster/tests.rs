use super::*;

#[test]
fn versions_and_addresses() {
    assert!(semver("1.2.1") < semver("1.3.0"));
    assert_eq!(semver("garbage"), (0, 0, 0));
    assert_eq!(semver("1.3.0-alpha"), (1, 3, 0));
    assert_eq!(join_host_port("::1", 4151), "[::1]:4151");
    assert_eq!(join_host_port("127.0.0.1", 4151), "127.0.0.1:4151");
}

#[test]
fn gather_rules() {
    let mut w = Vec::new();
    let r: Result<Vec<i32>, _> = gather(Kind::Nsqd, vec![], &mut w);
    assert_eq!(r.unwrap_err().to_string(), "failed to query any nsqd: ");
    let e = |t: &str| ClusterError::Http(HttpError::Redirect(t.into()));
    let r = gather(
        Kind::Lookupd,
        vec![Err::<i32, _>(e("a")), Err(e("b"))],
        &mut w,
    );
    assert_eq!(
        r.unwrap_err().to_string(),
        "failed to query any nsqlookupd: a\nb"
    );
    let r = gather(Kind::Nsqd, vec![Ok(1), Err(e("x")), Err(e("y"))], &mut w);
    assert_eq!(r.unwrap(), vec![1]);
    assert_eq!(w, vec!["x\ny".to_string()]);
}
