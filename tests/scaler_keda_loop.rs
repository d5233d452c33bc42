//! End to end: plays KEDA's control loop against the scaler over a real
//! Redis while a queue grows, the backend has an outage, and the queue drains
//! to empty, checking the replica count KEDA and the HPA would set each step.
mod scaler_common;
mod support;

use std::time::Duration;

use queue_exporter::scaler::proto::IsActiveResponse;
use scaler_common::*;
use support::*;
use tonic::Code;

/// The trigger of a `ScaledObject` with `type: external-push`.
const TRIGGER: [(&str, &str); 3] = [
    ("queue", "work-queue"),
    ("value", "10"),
    ("activationValue", "0"),
];

/// What KEDA and the HPA do for one ScaledObject
/// (`minReplicaCount: 0`, `maxReplicaCount: 10`,
/// `fallback: { failureThreshold: 3, replicas: 6 }`).
struct Keda {
    /// Current replicas of the worker Deployment.
    replicas: u64,
    /// Consecutive failed metric reads, for `fallback`.
    failures: u32,
    /// `maxReplicaCount`.
    max: u64,
    /// `fallback.failureThreshold`.
    failure_threshold: u32,
    /// `fallback.replicas`.
    fallback_replicas: u64,
}

impl Keda {
    /// A push from `StreamIsActive`: KEDA scales 0 → 1 at once.
    fn on_push(&mut self, msg: &IsActiveResponse) {
        if msg.result && self.replicas == 0 {
            self.replicas = 1;
        }
    }

    /// One polling interval: IsActive for 0 ↔ 1, then the HPA's
    /// `AverageValue` arithmetic with the spec's target; errors count towards
    /// `fallback`.
    async fn poll(&mut self, c: &mut Client) -> u64 {
        let active = match active(c, &TRIGGER).await {
            Ok(a) => a,
            Err(e) => return self.failed(e),
        };
        let (_, target_int, target_float) = match spec(c, &TRIGGER).await {
            Ok(s) => s,
            Err(e) => return self.failed(e),
        };
        let target = if target_float > 0.0 {
            target_float
        } else {
            target_int as f64
        };
        self.failures = 0;
        if !active {
            // After cooldownPeriod, KEDA scales an inactive workload to zero.
            self.replicas = 0;
            return self.replicas;
        }
        match metrics(c, &TRIGGER).await {
            Ok((int, float)) => {
                let desired = keda_replicas(keda_value(int, float), target);
                self.replicas = desired.clamp(1, self.max);
            }
            Err(e) => return self.failed(e),
        }
        self.replicas
    }

    fn failed(&mut self, e: tonic::Status) -> u64 {
        assert_eq!(
            e.code(),
            Code::Unavailable,
            "only an outage should fail here: {e:?}"
        );
        self.failures += 1;
        if self.failures >= self.failure_threshold {
            self.replicas = self.fallback_replicas;
        }
        self.replicas
    }
}

#[tokio::test]
async fn keda_loop_scales_up_with_the_queue_and_back_to_zero() {
    let mut redis = RedisServer::start();
    let app = TestApp::start(&redis_config(&redis.url, "100ms", "- key: work-queue")).await;
    let mut c = client(&app).await;
    wait_value(&c, &[("queue", "work-queue")], 0.0).await;

    let mut keda = Keda {
        replicas: 0,
        failures: 0,
        max: 10,
        failure_threshold: 3,
        fallback_replicas: 6,
    };
    // external-push: KEDA keeps one stream open per ScaledObject.
    let mut push = c
        .stream_is_active(obj(&TRIGGER))
        .await
        .unwrap()
        .into_inner();

    let mut seen = Vec::new();
    // Empty: stays at zero, and nothing is pushed.
    assert_eq!(keda.poll(&mut c).await, 0);
    seen.push((0, keda.replicas));

    // The queue grows from zero: the push wakes the workload before any poll.
    set_list_len(&mut redis.conn(), "work-queue", 3);
    let msg = tokio::time::timeout(Duration::from_secs(5), push.message())
        .await
        .expect("a push within one poll of the first items")
        .unwrap()
        .unwrap();
    keda.on_push(&msg);
    assert_eq!(keda.replicas, 1, "woken by the push");

    for depth in [3usize, 12, 27, 50, 120] {
        set_list_len(&mut redis.conn(), "work-queue", depth);
        wait_value(&c, &[("queue", "work-queue")], depth as f64).await;
        seen.push((depth, keda.poll(&mut c).await));
    }
    // It stayed active while growing: no repeated `true` (that would delay scale-to-zero).
    let extra = tokio::time::timeout(Duration::from_millis(300), push.message()).await;
    assert!(extra.is_err(), "no repeated true while active: {extra:?}");

    // Redis goes away: UNAVAILABLE, never a fake 0, so fallback holds 6 replicas.
    redis.stop();
    wait_code(
        &c,
        &[("queue", "work-queue")],
        Code::Unavailable,
        Duration::from_secs(15),
    )
    .await;
    for _ in 0..3 {
        keda.poll(&mut c).await;
    }
    assert_eq!(
        keda.replicas, 6,
        "fallback replicas while the data is unavailable"
    );
    seen.push((usize::MAX, keda.replicas));

    // Back, and draining to empty.
    redis.restart();
    for depth in [30usize, 9, 1, 0] {
        set_list_len(&mut redis.conn(), "work-queue", depth);
        wait_value(&c, &[("queue", "work-queue")], depth as f64).await;
        seen.push((depth, keda.poll(&mut c).await));
    }

    for (depth, replicas) in &seen {
        if *depth == usize::MAX {
            eprintln!("depth   ? (Redis down) -> replicas {replicas} (fallback)");
        } else {
            eprintln!("depth {depth:>3} -> replicas {replicas}");
        }
    }
    let replicas: Vec<u64> = seen.iter().map(|(_, r)| *r).collect();
    // ceil(depth / 10), capped at maxReplicaCount 10, zero when inactive.
    assert_eq!(replicas, vec![0, 1, 2, 3, 5, 10, 6, 3, 1, 1, 0]);
    app.stop().await;
}
