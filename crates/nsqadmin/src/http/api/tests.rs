use super::*;

/// nsqadmin on a loopback port, its nsqd nowhere (the bodies here are refused before any
/// nsqd would be asked).
async fn admin() -> crate::AdminHandle {
    let args = [
        "nsqadmin",
        "--http-address=127.0.0.1:0",
        "--nsqd-http-address=127.0.0.1:1",
    ];
    let crate::options::ParseOutcome::Run(opts) =
        crate::options::parse_args(args.map(String::from).to_vec()).unwrap()
    else {
        panic!("not a run")
    };
    crate::start(opts).await.unwrap()
}

/// POSTs `body` to `path`: the status and the `message`.
async fn post(h: &crate::AdminHandle, path: &str, body: &[u8]) -> (u16, String) {
    let r = nsq_testkit::http::request(h.http_addr(), "POST", path, &[], body).await;
    let v: Value = serde_json::from_slice(&r.body)
        .unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {}", r.text()));
    (
        r.status,
        v["message"].as_str().unwrap_or_default().to_string(),
    )
}

/// A bad JSON body is answered with Go's decoder error text
/// (`json.NewDecoder(req.Body).Decode(&body)` in nsqadmin/http.go).
#[tokio::test]
async fn bad_json_bodies_get_gos_decoder_errors() {
    let h = admin().await;
    let cases: &[(&[u8], &str)] = &[
        (b"", "EOF"),
        (
            b"notjson",
            "invalid character 'o' in literal null (expecting 'u')",
        ),
        (
            b"{bad}",
            "invalid character 'b' looking for beginning of object key string",
        ),
        (
            br#"{"topic":}"#,
            "invalid character '}' looking for beginning of value",
        ),
        (
            b"[1,]",
            "invalid character ']' looking for beginning of value",
        ),
        (br#"{"topic":"a""#, "unexpected EOF"),
        (br#""abc"#, "unexpected EOF"),
        (
            b"{\"topic\":\"a\x01\"}",
            r"invalid character '\x01' in string literal",
        ),
        (
            br#"{"topic" "a"}"#,
            "invalid character '\"' after object key",
        ),
        (
            br#"{"topic":1}"#,
            "json: cannot unmarshal number into Go struct field .topic of type string",
        ),
        (
            b"[]",
            "json: cannot unmarshal array into Go value of type struct { Topic string \
             \"json:\\\"topic\\\"\"; Channel string \"json:\\\"channel\\\"\" }",
        ),
        // Only the first value is read.
        (br#"{"topic":"bad topic"} {"#, "INVALID_TOPIC"),
    ];
    for (body, want) in cases {
        assert_eq!(
            post(&h, "/api/topics", body).await,
            (400, want.to_string()),
            "{}",
            String::from_utf8_lossy(body)
        );
    }
    assert_eq!(
        post(&h, "/api/topics/t", br#"{"action":["pause"]}"#).await,
        (
            400,
            "json: cannot unmarshal array into Go struct field .action of type string".into()
        )
    );
    assert_eq!(
        post(&h, "/api/topics/t/c", b"{\"action\":\"pause\"").await,
        (400, "unexpected EOF".into())
    );
    h.shutdown().await;
}

/// Go's nsqadmin reads a JSON body whatever its size (no limit on `req.Body`), so a huge
/// body is judged by what it says.
#[tokio::test]
async fn huge_json_bodies_are_read_as_go_reads_them() {
    let h = admin().await;
    let mut long_topic = br#"{"topic":""#.to_vec();
    long_topic.resize(long_topic.len() + (2 << 20), b'a');
    long_topic.extend_from_slice(br#""}"#);
    assert_eq!(
        post(&h, "/api/topics", &long_topic).await,
        (400, "INVALID_TOPIC".into())
    );
    let mut spaced = vec![b' '; 2 << 20];
    spaced.extend_from_slice(br#"{"topic":"ok","channel":"bad channel"}"#);
    assert_eq!(
        post(&h, "/api/topics", &spaced).await,
        (400, "INVALID_CHANNEL".into())
    );
    let mut action = br#"{"action":"pause","x":""#.to_vec();
    action.resize(action.len() + (2 << 20), b'a');
    action.extend_from_slice(br#"","action":"explode"}"#);
    assert_eq!(
        post(&h, "/api/topics/t", &action).await,
        (400, "INVALID_ACTION".into())
    );
    h.shutdown().await;
}

#[test]
fn warnings() {
    assert_eq!(warn_msg(&[]), "");
    assert_eq!(warn_msg(&["a\nb".into(), "c".into()]), "WARNING: a\nb; c");
}

/// A settings body is judged before any nsqd is asked: an object with a `settings` object of
/// strings, numbers or nulls.
#[tokio::test]
async fn bad_settings_bodies_are_refused() {
    let h = admin().await;
    for body in [
        &b""[..],
        b"notjson",
        b"[]",
        br#"{"ttl":"1m"}"#,
        br#"{"settings":[]}"#,
        br#"{"settings":{"ttl":true}}"#,
        br#"{"settings":{"ttl":["1m"]}}"#,
    ] {
        for path in ["/api/settings/t", "/api/settings/t/c"] {
            assert_eq!(
                post(&h, path, body).await,
                (400, "INVALID_BODY".into()),
                "{path} {}",
                String::from_utf8_lossy(body)
            );
        }
    }
    let r = nsq_testkit::http::request(h.http_addr(), "GET", "/api/peek/t/c?n=0", &[], b"").await;
    assert_eq!(
        (r.status, r.text()),
        (400, r#"{"message":"INVALID_N"}"#.to_string())
    );
    h.shutdown().await;
}
