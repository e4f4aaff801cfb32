//! Property tests of the worker protocol's framing (issue 20): any head and body round-trip
//! through the blocking and async readers, and no byte string makes a reader panic or allocate
//! past its limits.
#![cfg(test)]

use kubeless_runtime::protocol::{
    FrameError, RequestHead, read_frame, read_frame_blocking, write_frame_blocking,
};
use proptest::collection::vec;
use proptest::prelude::*;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

proptest! {
    // Failures print their minimal input; nothing is written into the source tree.
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_frame_round_trips(
        method in "[A-Z]{1,7}",
        path in "/[ -~]{0,40}",
        headers in vec(("[a-z-]{1,12}", "\\PC{0,30}"), 0..8),
        body in vec(any::<u8>(), 0..2048),
    ) {
        let head = RequestHead {
            method,
            url: path.clone(),
            path,
            query: String::new(),
            headers,
            remote_addr: None,
        };
        let mut buf = Vec::new();
        write_frame_blocking(&mut buf, &head, &body).unwrap();

        let (h, b) = read_frame_blocking(&mut buf.as_slice(), body.len()).unwrap().unwrap();
        let back: RequestHead = serde_json::from_slice(&h).unwrap();
        prop_assert_eq!(&back.method, &head.method);
        prop_assert_eq!(&back.path, &head.path);
        prop_assert_eq!(&back.headers, &head.headers);
        prop_assert_eq!(&b, &body);

        let (h, b) = runtime()
            .block_on(read_frame(&mut buf.as_slice(), body.len()))
            .unwrap()
            .unwrap();
        prop_assert_eq!(serde_json::from_slice::<RequestHead>(&h).unwrap().headers, head.headers);
        prop_assert_eq!(&b[..], &body[..]);
    }

    #[test]
    fn a_body_over_the_limit_is_refused_before_it_is_read(extra in 1usize..4096) {
        let head = RequestHead {
            method: "POST".into(),
            path: "/".into(),
            query: String::new(),
            url: "/".into(),
            headers: vec![],
            remote_addr: None,
        };
        let body = vec![7u8; 100 + extra];
        let mut buf = Vec::new();
        write_frame_blocking(&mut buf, &head, &body).unwrap();
        let over = |e: &FrameError| matches!(e, FrameError::BodyOverLimit { max: 100, .. });
        prop_assert!(over(&read_frame_blocking(&mut buf.as_slice(), 100).unwrap_err()));
        let err = runtime().block_on(read_frame(&mut buf.as_slice(), 100)).unwrap_err();
        prop_assert!(over(&err));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..64)) {
        // Length prefixes in random bytes ask for up to 4 GiB: the limits must refuse them.
        let _ = read_frame_blocking(&mut bytes.as_slice(), 1024);
        let _ = runtime().block_on(read_frame(&mut bytes.as_slice(), 1024));
    }
}
