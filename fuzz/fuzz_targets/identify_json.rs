//! Fuzz target: arbitrary bytes as an IDENTIFY body (nsqd/protocol_v2.go, IDENTIFY, which
//! decodes with Go's encoding/json), then validation against the server's bounds, feature
//! negotiation and the JSON response, as nsqd does for a real connection. Checks: no panic;
//! an accepted request survives a round trip through JSON (re-encoded with serde_json, decoded
//! again by `parse_identify`); the response is valid JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nsq_protocol::identify::{
    negotiate, parse_identify, IdentifyLimits, IdentifyRequest, IdentifyResponse, ServerFeatures,
};
use serde_json::json;

fn to_json(r: &IdentifyRequest) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "client_id": r.client_id,
        "hostname": r.hostname,
        "user_agent": r.user_agent,
        "feature_negotiation": r.feature_negotiation,
        "tls_v1": r.tls_v1,
        "snappy": r.snappy,
        "deflate": r.deflate,
        "heartbeat_interval": r.heartbeat_interval,
        "output_buffer_size": r.output_buffer_size,
        "output_buffer_timeout": r.output_buffer_timeout,
        "msg_timeout": r.msg_timeout,
        "deflate_level": r.deflate_level,
        "sample_rate": r.sample_rate,
    }))
    .expect("a JSON value serializes")
}

fuzz_target!(|data: &[u8]| {
    let Ok(req) = parse_identify(data) else {
        return;
    };
    let again = parse_identify(&to_json(&req)).expect("re-encoded request parses");
    assert_eq!(again, req, "JSON round trip changed the request");

    let limits = IdentifyLimits::default();
    let Ok(settings) = req.validate(&limits) else {
        return;
    };
    for server in [
        ServerFeatures::default(),
        ServerFeatures {
            tls_available: true,
            deflate_enabled: true,
            snappy_enabled: true,
            max_deflate_level: 9,
        },
    ] {
        if let Ok(neg) = negotiate(&req, &server) {
            let resp = IdentifyResponse::new(
                2500,
                limits.max_msg_timeout_ms,
                &settings,
                &neg,
                server.max_deflate_level,
                false,
            );
            let v: serde_json::Value =
                serde_json::from_slice(&resp.to_json()).expect("response is JSON");
            assert!(v.is_object());
        }
    }
});
