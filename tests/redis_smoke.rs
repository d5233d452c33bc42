//! Smoke test: a list in a private Redis shows up on /metrics.
mod support;

use std::time::Duration;
use support::*;

#[tokio::test]
async fn a_list_appears_with_its_depth() {
    let redis = RedisServer::start();
    let _: () = redis::cmd("RPUSH")
        .arg("work-queue")
        .arg("a")
        .arg("b")
        .query(&mut redis.conn())
        .unwrap();
    let app = TestApp::start(&format!(
        "listen: {{ grpc: null }}\nsources:\n  - name: main\n    type: redis\n    url: {}\n    poll_interval: 100ms\n    queues:\n      - key: work-queue\n",
        redis.url
    ))
    .await;
    let depth = wait_for("depth 2", Duration::from_secs(10), || async {
        sample(
            &app.metrics().await,
            "queue_depth",
            &[("queue", "work-queue")],
        )
    })
    .await;
    assert_eq!(depth, 2.0);
    app.stop().await;
}
