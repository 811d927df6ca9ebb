//! A recording HTTP receiver for alert deliveries: spokekeeper's generic webhook, the real
//! Alertmanager's notifications, and, where a test needs a fault the real one cannot
//! produce (5xx, 400, a hang), a stand-in for Alertmanager itself.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use serde_json::Value;
use time::OffsetDateTime;

/// How the receiver answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Answer200,
    Answer400,
    Answer500,
    Hang,
}

/// One delivered POST: when it arrived and its JSON body.
#[derive(Clone, Debug)]
pub struct Post {
    pub at: OffsetDateTime,
    pub body: Value,
}

#[derive(Default)]
struct Seen {
    requests: usize,
    posts: Vec<Post>,
    violations: Vec<String>,
}

/// Records POSTs to its one path (method, path, Content-Type and JSON checked; anything
/// else is a violation, see [`Receiver::assert_clean`]).
#[derive(Clone)]
pub struct Receiver {
    /// `http://127.0.0.1:PORT`, without the path.
    pub base: String,
    path: &'static str,
    mode: Arc<Mutex<Mode>>,
    seen: Arc<Mutex<Seen>>,
}

impl Receiver {
    pub async fn start(path: &'static str) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let r = Receiver {
            base: format!("http://{}", listener.local_addr().unwrap()),
            path,
            mode: Arc::new(Mutex::new(Mode::Answer200)),
            seen: Arc::new(Mutex::new(Seen::default())),
        };
        let app = axum::Router::new().fallback(receive).with_state(r.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        r
    }

    pub fn url(&self) -> String {
        format!("{}{}", self.base, self.path)
    }

    pub fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    pub fn posts(&self) -> Vec<Post> {
        self.seen.lock().unwrap().posts.clone()
    }

    pub fn requests(&self) -> usize {
        self.seen.lock().unwrap().requests
    }

    pub fn assert_clean(&self) {
        let v = &self.seen.lock().unwrap().violations;
        assert!(v.is_empty(), "{}: {v:?}", self.path);
    }
}

async fn receive(
    State(r): State<Receiver>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    let at = OffsetDateTime::now_utc();
    let mode = *r.mode.lock().unwrap();
    let violation = |what: String, code| {
        let mut seen = r.seen.lock().unwrap();
        seen.requests += 1;
        seen.violations.push(what.clone());
        (code, what)
    };
    if method != Method::POST {
        return violation(format!("method {method}"), StatusCode::METHOD_NOT_ALLOWED);
    }
    if uri.path() != r.path {
        return violation(format!("path {}", uri.path()), StatusCode::NOT_FOUND);
    }
    let ct = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if ct != "application/json" {
        return violation(
            format!("content-type {ct:?}"),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        );
    }
    let Ok(json) = serde_json::from_slice::<Value>(&body) else {
        return violation("body is not JSON".into(), StatusCode::BAD_REQUEST);
    };
    r.seen.lock().unwrap().requests += 1;
    match mode {
        Mode::Answer200 => {
            r.seen.lock().unwrap().posts.push(Post { at, body: json });
            (StatusCode::OK, String::new())
        }
        Mode::Answer400 => (StatusCode::BAD_REQUEST, "bad alert".into()),
        Mode::Answer500 => (StatusCode::INTERNAL_SERVER_ERROR, "boom".into()),
        Mode::Hang => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            (StatusCode::OK, String::new())
        }
    }
}
