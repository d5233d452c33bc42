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
        r#"
        listen: {{ grpc: null }}
        sources:
          - name: main
            type: redis
            url: {url}
            poll_interval: 100ms
            queues:
              - key: work-queue
        "#,
        url = redis.url
    ))
    .await;
    let depth = wait_for("depth 2", Duration::from_secs(10), || async {
        app.scrape().await.depth("work-queue")
    })
    .await;
    assert_eq!(depth, 2.0);
    app.stop().await;
}
