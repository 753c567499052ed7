//! IDENTIFY: Go `encoding/json` leniency, validation texts and order, negotiation, response.

use std::time::Duration;

use nsq_protocol::identify::{
    negotiate, parse_identify, ClientSettings, IdentifyLimits, IdentifyRequest, IdentifyResponse,
    Negotiated, ServerFeatures,
};

const DECODE_ERR: &str = "E_BAD_BODY IDENTIFY failed to decode JSON body";

fn parse(body: &str) -> IdentifyRequest {
    parse_identify(body.as_bytes()).unwrap_or_else(|e| panic!("{body}: {e}"))
}

fn parse_err(body: &[u8]) -> String {
    match parse_identify(body) {
        Ok(r) => panic!("{:?} decoded to {r:?}", String::from_utf8_lossy(body)),
        Err(e) => e.to_string(),
    }
}

#[test]
fn null_and_empty_object() {
    assert_eq!(parse("null"), IdentifyRequest::default());
    assert_eq!(parse(" {} \n"), IdentifyRequest::default());
}

#[test]
fn full_request() {
    let r = parse(
        r#"{"client_id":"c","hostname":"h","user_agent":"go-nsq/1.1.0","feature_negotiation":true,
        "tls_v1":true,"snappy":false,"deflate":true,"heartbeat_interval":5000,
        "output_buffer_size":64,"output_buffer_timeout":-1,"msg_timeout":1000,
        "deflate_level":3,"sample_rate":10,"short_id":"x","long_id":"y",
        "topology_region":"r","topology_zone":"z","nested":{"a":[1,2,{"b":null}]}}"#,
    );
    assert_eq!(
        r,
        IdentifyRequest {
            client_id: "c".into(),
            hostname: "h".into(),
            user_agent: "go-nsq/1.1.0".into(),
            feature_negotiation: true,
            tls_v1: true,
            snappy: false,
            deflate: true,
            heartbeat_interval: 5000,
            output_buffer_size: 64,
            output_buffer_timeout: -1,
            msg_timeout: 1000,
            deflate_level: 3,
            sample_rate: 10,
        }
    );
}

#[test]
fn case_insensitive_keys_last_wins() {
    let r =
        parse(r#"{"CLIENT_ID":"a","Feature_Negotiation":true,"client_id":"b","Client_Id":"c"}"#);
    assert_eq!(r.client_id, "c");
    assert!(r.feature_negotiation);
    // Go folds with Unicode simple folding: U+017F LATIN SMALL LETTER LONG S matches 's'.
    let r = parse("{\"\u{17f}nappy\":true}");
    assert!(r.snappy);
    // A null value leaves the field unchanged.
    let r = parse(r#"{"heartbeat_interval":5000,"heartbeat_interval":null,"hostname":null}"#);
    assert_eq!(r.heartbeat_interval, 5000);
    assert_eq!(r.hostname, "");
}

#[test]
fn strings_replace_invalid_utf8() {
    let r = parse_identify(b"{\"client_id\":\"a\xffb\"}").unwrap();
    assert_eq!(r.client_id, "a\u{fffd}b");
    let r = parse(r#"{"client_id":"x\ud800y","hostname":"\u00e9\ud83d\ude80"}"#);
    assert_eq!(r.client_id, "x\u{fffd}y");
    assert_eq!(r.hostname, "é🚀");
}

#[test]
fn decode_errors() {
    for body in [
        &b""[..],
        b"   ",
        b"[]",
        b"\"x\"",
        b"5",
        b"true",
        b"not json",
        b"{} x",
        b"{}{}",
        b"{\"heartbeat_interval\":\"5000\"}",
        b"{\"heartbeat_interval\":3e4}",
        b"{\"heartbeat_interval\":30000.5}",
        b"{\"heartbeat_interval\":30000.0}",
        b"{\"heartbeat_interval\":9223372036854775808}",
        b"{\"heartbeat_interval\":true}",
        b"{\"sample_rate\":2147483648}",
        b"{\"sample_rate\":-2147483649}",
        b"{\"feature_negotiation\":1}",
        b"{\"feature_negotiation\":\"true\"}",
        b"{\"client_id\":5}",
        b"{\"client_id\":[\"a\"]}",
        b"{\"client_id\":{}}",
        b"{\"a\":1,}",
        b"{'a':1}",
        b"{\"client_id\":\"a\nb\"}",
    ] {
        assert_eq!(
            parse_err(body),
            DECODE_ERR,
            "{:?}",
            String::from_utf8_lossy(body)
        );
    }
    // Edge values that are fine.
    assert_eq!(
        parse(r#"{"sample_rate":-2147483648}"#).sample_rate,
        i32::MIN
    );
    assert_eq!(
        parse(r#"{"deflate_level":9223372036854775807}"#).deflate_level,
        i64::MAX
    );
}

fn validate_err(body: &str) -> String {
    parse(body)
        .validate(&IdentifyLimits::default())
        .unwrap_err()
        .to_string()
}

#[test]
fn validation_texts() {
    let cases = [
        (
            r#"{"heartbeat_interval":999}"#,
            "E_BAD_BODY IDENTIFY heartbeat interval (999) is invalid",
        ),
        (
            r#"{"heartbeat_interval":-2}"#,
            "E_BAD_BODY IDENTIFY heartbeat interval (-2) is invalid",
        ),
        (
            r#"{"heartbeat_interval":60001}"#,
            "E_BAD_BODY IDENTIFY heartbeat interval (60001) is invalid",
        ),
        (
            r#"{"output_buffer_timeout":24}"#,
            "E_BAD_BODY IDENTIFY output buffer timeout (24) is invalid",
        ),
        (
            r#"{"output_buffer_timeout":30001}"#,
            "E_BAD_BODY IDENTIFY output buffer timeout (30001) is invalid",
        ),
        (
            r#"{"output_buffer_size":63}"#,
            "E_BAD_BODY IDENTIFY output buffer size (63) is invalid",
        ),
        (
            r#"{"output_buffer_size":65537}"#,
            "E_BAD_BODY IDENTIFY output buffer size (65537) is invalid",
        ),
        (
            r#"{"sample_rate":100}"#,
            "E_BAD_BODY IDENTIFY sample rate (100) is invalid",
        ),
        (
            r#"{"sample_rate":-1}"#,
            "E_BAD_BODY IDENTIFY sample rate (-1) is invalid",
        ),
        (
            r#"{"msg_timeout":-1}"#,
            "E_BAD_BODY IDENTIFY msg timeout (-1) is invalid",
        ),
        (
            r#"{"msg_timeout":999}"#,
            "E_BAD_BODY IDENTIFY msg timeout (999) is invalid",
        ),
        (
            r#"{"msg_timeout":900001}"#,
            "E_BAD_BODY IDENTIFY msg timeout (900001) is invalid",
        ),
    ];
    for (body, want) in cases {
        assert_eq!(validate_err(body), want, "{body}");
    }
}

#[test]
fn validation_order() {
    let all_bad = r#"{"heartbeat_interval":1,"output_buffer_timeout":1,"output_buffer_size":1,"sample_rate":100,"msg_timeout":1}"#;
    assert_eq!(
        validate_err(all_bad),
        "E_BAD_BODY IDENTIFY heartbeat interval (1) is invalid"
    );
    let r =
        r#"{"output_buffer_timeout":1,"output_buffer_size":1,"sample_rate":100,"msg_timeout":1}"#;
    assert_eq!(
        validate_err(r),
        "E_BAD_BODY IDENTIFY output buffer timeout (1) is invalid"
    );
    let r = r#"{"output_buffer_size":1,"sample_rate":100,"msg_timeout":1}"#;
    assert_eq!(
        validate_err(r),
        "E_BAD_BODY IDENTIFY output buffer size (1) is invalid"
    );
    let r = r#"{"sample_rate":100,"msg_timeout":1}"#;
    assert_eq!(
        validate_err(r),
        "E_BAD_BODY IDENTIFY sample rate (100) is invalid"
    );
}

#[test]
fn effective_settings() {
    let limits = IdentifyLimits::default();
    let defaults = ClientSettings {
        heartbeat: Some(Duration::from_secs(30)),
        output_buffer_size: 16384,
        output_buffer_timeout: Duration::from_millis(250),
        sample_rate: 0,
        msg_timeout: Duration::from_secs(60),
    };
    assert_eq!(parse("{}").validate(&limits).unwrap(), defaults);
    assert_eq!(ClientSettings::defaults(&limits), defaults);

    let s = parse(
        r#"{"heartbeat_interval":-1,"output_buffer_timeout":1000,"output_buffer_size":-1,"sample_rate":99,"msg_timeout":900000}"#,
    )
    .validate(&limits)
    .unwrap();
    assert_eq!(
        s,
        ClientSettings {
            heartbeat: None,
            output_buffer_size: 1,
            output_buffer_timeout: Duration::ZERO,
            sample_rate: 99,
            msg_timeout: Duration::from_secs(900),
        }
    );
    let s = parse(
        r#"{"heartbeat_interval":1000,"output_buffer_timeout":-1,"output_buffer_size":65536,"msg_timeout":1000}"#,
    )
    .validate(&limits)
    .unwrap();
    assert_eq!(s.heartbeat, Some(Duration::from_secs(1)));
    assert_eq!(s.output_buffer_timeout, Duration::ZERO);
    assert_eq!(s.output_buffer_size, 65536);
    assert_eq!(s.msg_timeout, Duration::from_secs(1));
    let s =
        parse(r#"{"heartbeat_interval":60000,"output_buffer_timeout":25,"output_buffer_size":64}"#)
            .validate(&limits)
            .unwrap();
    assert_eq!(s.heartbeat, Some(Duration::from_secs(60)));
    assert_eq!(s.output_buffer_timeout, Duration::from_millis(25));
    assert_eq!(s.output_buffer_size, 64);
}

#[test]
fn negotiation() {
    let server = ServerFeatures::default();
    let req = |body: &str| parse(body);
    let n = negotiate(
        &req(r#"{"tls_v1":true,"deflate":true,"deflate_level":9}"#),
        &server,
    )
    .unwrap();
    assert_eq!(
        n,
        Negotiated {
            tls_v1: false,
            deflate: true,
            deflate_level: 6,
            snappy: false
        }
    );
    let n = negotiate(&req(r#"{"deflate":true,"deflate_level":3}"#), &server).unwrap();
    assert_eq!(n.deflate_level, 3);
    // Level requested without deflate: 6 capped at the max.
    let capped = ServerFeatures {
        max_deflate_level: 4,
        ..server
    };
    let n = negotiate(&req(r#"{"deflate_level":3}"#), &capped).unwrap();
    assert_eq!((n.deflate, n.deflate_level), (false, 4));
    let n = negotiate(
        &req(r#"{"snappy":true,"tls_v1":true}"#),
        &ServerFeatures {
            tls_available: true,
            ..server
        },
    )
    .unwrap();
    assert_eq!(
        n,
        Negotiated {
            tls_v1: true,
            deflate: false,
            deflate_level: 6,
            snappy: true
        }
    );
    let e = negotiate(&req(r#"{"snappy":true,"deflate":true}"#), &server).unwrap_err();
    assert_eq!(
        e.to_string(),
        "E_IDENTIFY_FAILED cannot enable both deflate and snappy compression"
    );
    // Disabled on the server: not negotiated, so no conflict.
    let no_snappy = ServerFeatures {
        snappy_enabled: false,
        ..server
    };
    let n = negotiate(&req(r#"{"snappy":true,"deflate":true}"#), &no_snappy).unwrap();
    assert_eq!((n.deflate, n.snappy), (true, false));
}

#[test]
fn response_json_key_order() {
    let limits = IdentifyLimits::default();
    let settings = parse("{}").validate(&limits).unwrap();
    let n = negotiate(&parse("{}"), &ServerFeatures::default()).unwrap();
    let resp = IdentifyResponse::new(2500, 900_000, &settings, &n, 6, false);
    assert_eq!(
        String::from_utf8(resp.to_json()).unwrap(),
        r#"{"max_rdy_count":2500,"version":"1.3.0","max_msg_timeout":900000,"msg_timeout":60000,"tls_v1":false,"deflate":false,"deflate_level":6,"max_deflate_level":6,"snappy":false,"sample_rate":0,"auth_required":false,"output_buffer_size":16384,"output_buffer_timeout":250}"#
    );
    let settings = parse(r#"{"output_buffer_size":-1}"#)
        .validate(&limits)
        .unwrap();
    let resp = IdentifyResponse::new(2500, 900_000, &settings, &n, 6, true);
    assert_eq!(
        (
            resp.output_buffer_size,
            resp.output_buffer_timeout,
            resp.auth_required
        ),
        (1, 0, true)
    );
}
