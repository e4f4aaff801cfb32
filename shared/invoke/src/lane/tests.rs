use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

use super::*;

type Body = Empty<Bytes>;

fn authority(s: &str) -> Authority {
    s.parse().unwrap()
}

/// A function answering `ok`, counting the connections it accepted.
async fn function() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let a = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            a.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(b"ok"))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (addr, accepted)
}

async fn sender(addr: SocketAddr, lane: &Lane<Body>) -> SendRequest<Body> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (s, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    lane.add(async move {
        let _ = conn.await;
    });
    s
}

async fn call(s: &mut SendRequest<Body>, addr: SocketAddr) -> Bytes {
    s.ready().await.unwrap();
    let req = http::Request::get("/")
        .header(http::header::HOST, addr.to_string())
        .body(Empty::new())
        .unwrap();
    let resp = s.send_request(req).await.unwrap();
    resp.into_body().collect().await.unwrap().to_bytes()
}

#[test]
fn a_lane_lends_one_connection_per_endpoint_and_has_bounded_room() {
    let lane: Lane<Body> = Lane::default();
    let a = authority("10.0.0.1:8080");
    assert!(matches!(lane.take(&a), Taken::Room));
    // Lent (being opened): a second request for it meanwhile takes the pool.
    assert!(matches!(lane.take(&a), Taken::Full));
    // Given back without a connection (the call failed): room again.
    lane.give_back(&a, None);
    assert!(matches!(lane.take(&a), Taken::Room));
    for i in 2..=MAX_ENDPOINTS {
        let other = authority(&format!("10.0.0.{i}:8080"));
        assert!(matches!(lane.take(&other), Taken::Room), "endpoint {i}");
    }
    let one_more = authority("10.0.0.99:8080");
    assert!(matches!(lane.take(&one_more), Taken::Full));
    lane.give_back(&a, None);
    assert!(matches!(lane.take(&one_more), Taken::Room));
}

#[tokio::test]
async fn connections_are_driven_by_the_running_task_and_reused() {
    let (addr, accepted) = function().await;
    let lane: Lane<Body> = Lane::default();
    let a = authority(&addr.to_string());
    // Nothing else polls the connections: the answers arrive only if `run` drives them.
    let bodies = lane
        .run(async {
            let mut got = Vec::new();
            for _ in 0..5 {
                let mut s = match lane.take(&a) {
                    Taken::Sender(s) => s,
                    Taken::Room => sender(addr, &lane).await,
                    Taken::Full => panic!("the lane had room"),
                };
                got.push(call(&mut s, addr).await);
                lane.give_back(&a, Some(s));
            }
            got
        })
        .await;
    assert_eq!(bodies, vec![Bytes::from_static(b"ok"); 5]);
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "one connection for five calls"
    );
}

#[tokio::test]
async fn a_closed_connection_is_not_lent_again() {
    let (addr, _) = function().await;
    let lane: Lane<Body> = Lane::default();
    let a = authority(&addr.to_string());
    lane.run(async {
        let Taken::Room = lane.take(&a) else {
            panic!("an empty lane has room")
        };
        let s = sender(addr, &lane).await;
        lane.give_back(&a, Some(s));
        let Taken::Sender(s) = lane.take(&a) else {
            panic!("the connection was given back")
        };
        // The request side is dropped: the connection ends and is not kept.
        drop(s);
        lane.give_back(&a, None);
        assert!(matches!(lane.take(&a), Taken::Room));
    })
    .await;
}

#[tokio::test]
async fn a_wake_from_outside_the_task_polls_the_lane_again() {
    let lane: Lane<Body> = Lane::default();
    let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
    let sent = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        tx.send(7).unwrap();
    });
    let got = tokio::time::timeout(std::time::Duration::from_secs(5), lane.run(rx))
        .await
        .expect("the wake reached the task")
        .unwrap();
    assert_eq!(got, 7);
    sent.await.unwrap();
}
