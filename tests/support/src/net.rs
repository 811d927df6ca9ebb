//! Network peers that misbehave on purpose.

use std::net::SocketAddr;

/// A TCP server on 127.0.0.1 that accepts connections and never says anything; it stops
/// (and drops what it holds) with the returned guard.
pub async fn silent_server() -> (SocketAddr, SilentServer) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    (addr, SilentServer(task))
}

pub struct SilentServer(tokio::task::JoinHandle<()>);

impl Drop for SilentServer {
    fn drop(&mut self) {
        self.0.abort();
    }
}
