//! The cluster's rules: what KEDA and the Horizontal Pod Autoscaler do with
//! the scaler's answers. KEDA polls `IsActive` every `pollingInterval`,
//! wakes a ScaledObject from zero and puts it back to zero after
//! `cooldownPeriod` inactive; the HPA, every sync, turns the metric into a
//! replica count with the AverageValue calculator (within a tolerance it
//! keeps the count), stabilises it against its recent recommendations and
//! limits how fast it moves by its behavior's policies
//! (kube-controller-manager's `pkg/controller/podautoscaler`: the replica
//! calculator, `stabilizeRecommendationWithBehaviors`,
//! `convertDesiredReplicasWithBehaviorRate`).

/// The timings and limits of the cluster a replay runs in, in seconds.
/// [`Cluster::kubernetes_defaults`] is what a ScaledObject that sets
/// nothing gets.
#[derive(Debug, Clone, PartialEq)]
pub struct Cluster {
    /// How often the HPA syncs (kube-controller-manager's
    /// `--horizontal-pod-autoscaler-sync-period`, 15 s).
    pub hpa_sync: f64,
    /// KEDA's `pollingInterval`: how often it asks `IsActive` (30 s).
    pub keda_poll: f64,
    /// KEDA's `cooldownPeriod`: how long inactive before it scales to zero (300 s).
    pub cooldown: f64,
    /// From the decision to create a pod to the pod taking jobs.
    pub pod_start: f64,
    /// `minReplicaCount`: 0 lets KEDA scale to zero.
    pub min_replicas: usize,
    /// `maxReplicaCount`: the HPA sets at most this many.
    pub max_replicas: usize,
    /// The HPA's tolerance: within this ratio of the target it keeps the
    /// replica count (0.1).
    pub tolerance: f64,
    /// The HPA's `behavior`: how fast it may scale each way.
    pub behavior: Behavior,
    /// KEDA's `fallback`: the replicas the HPA is told while the scaler
    /// keeps failing; `None` (KEDA's default) tells it nothing, so the HPA
    /// keeps the replicas it has.
    pub fallback: Option<Fallback>,
}

/// KEDA's `spec.fallback` (its `pkg/fallback`): once the scaler has
/// failed more than `failure_threshold` metric requests in a row, KEDA
/// answers the HPA `target × replicas` in its place, so the HPA moves to
/// those replicas (through its own tolerance, windows and policies); a
/// success resets the count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fallback {
    /// `failureThreshold`: failed requests in a row tolerated before it applies.
    pub failure_threshold: u32,
    /// `replicas`: what it holds (as `behavior` says).
    pub replicas: u32,
    /// `behavior`: how `replicas` and the replicas running combine.
    pub behavior: FallbackBehavior,
}

/// `spec.fallback.behavior` (KEDA's `doFallback`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallbackBehavior {
    /// `static` (the default): `replicas`.
    Static,
    /// `currentReplicas`: the replicas running.
    CurrentReplicas,
    /// `currentReplicasIfHigher`: the replicas running if more than `replicas`.
    CurrentReplicasIfHigher,
    /// `currentReplicasIfLower`: the replicas running if fewer than `replicas`.
    CurrentReplicasIfLower,
}

impl Fallback {
    /// The replicas KEDA reports with `current` running.
    pub fn replicas_with(&self, current: usize) -> usize {
        let fixed = self.replicas as usize;
        match self.behavior {
            FallbackBehavior::Static => fixed,
            FallbackBehavior::CurrentReplicas => current,
            FallbackBehavior::CurrentReplicasIfHigher => current.max(fixed),
            FallbackBehavior::CurrentReplicasIfLower => current.min(fixed),
        }
    }
}

impl Cluster {
    /// KEDA's and Kubernetes' defaults, with `pod_start` as given.
    pub fn kubernetes_defaults(pod_start: f64) -> Cluster {
        Cluster {
            hpa_sync: 15.0,
            keda_poll: 30.0,
            cooldown: 300.0,
            pod_start,
            min_replicas: 0,
            // KEDA's default maxReplicaCount.
            max_replicas: 100,
            tolerance: 0.1,
            behavior: Behavior::kubernetes_default(300.0),
            fallback: None,
        }
    }
}

/// An HPA's `behavior`: the rules for scaling up and for scaling down.
#[derive(Debug, Clone, PartialEq)]
pub struct Behavior {
    /// `scaleUp`.
    pub up: Rules,
    /// `scaleDown`.
    pub down: Rules,
}

impl Behavior {
    /// Kubernetes' defaults (`SetDefaults_HorizontalPodAutoscalerBehavior`):
    /// up at once, by 100 % or 4 pods per 15 s, whichever is more; down
    /// after `down_window` of stabilisation (the controller's
    /// `--horizontal-pod-autoscaler-downscale-stabilization`, 300 s), by
    /// up to 100 % per 15 s.
    pub fn kubernetes_default(down_window: f64) -> Behavior {
        Behavior {
            up: Rules {
                stabilization: 0.0,
                select: Select::Max,
                policies: vec![
                    Policy::new(PolicyKind::Pods, 4, 15.0),
                    Policy::new(PolicyKind::Percent, 100, 15.0),
                ],
            },
            down: Rules {
                stabilization: down_window,
                select: Select::Max,
                policies: vec![Policy::new(PolicyKind::Percent, 100, 15.0)],
            },
        }
    }
}

/// One direction's rules (`HPAScalingRules`).
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    /// `stabilizationWindowSeconds`: up takes the lowest, down the highest
    /// recommendation of this long ago.
    pub stabilization: f64,
    /// `selectPolicy`: which policy's limit holds.
    pub select: Select,
    /// `policies`.
    pub policies: Vec<Policy>,
}

/// `selectPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Select {
    /// The policy allowing the largest change.
    Max,
    /// The policy allowing the smallest change.
    Min,
    /// No change this way at all.
    Disabled,
}

/// One `HPAScalingPolicy`: at most `value` pods or percent per `period`.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Pods or percent.
    pub kind: PolicyKind,
    /// How many pods, or what percent of the replicas at the period's start.
    pub value: u32,
    /// `periodSeconds`.
    pub period: f64,
}

impl Policy {
    /// A policy of `value` (pods or percent) per `period` seconds.
    pub fn new(kind: PolicyKind, value: u32, period: f64) -> Policy {
        Policy {
            kind,
            value,
            period,
        }
    }
}

/// A policy's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// `Pods`: a number of pods.
    Pods,
    /// `Percent`: a share of the replicas at the period's start.
    Percent,
}

/// The HPA's replica calculator for an AverageValue target (an external
/// metric, as KEDA's): the metric over the target per replica; within the
/// tolerance of 1 the count stays, else it is the metric over the target,
/// rounded up. Values are compared as Kubernetes' milli-quantities.
pub fn desired_replicas(value: f64, target: f64, current: usize, tolerance: f64) -> usize {
    if (1.0 - value / (target * current as f64)).abs() > tolerance {
        milli_ratio(value, target).ceil() as usize
    } else {
        current
    }
}

/// `value` over `target` as Kubernetes divides them: both as
/// milli-quantities (whole thousandths).
fn milli_ratio(value: f64, target: f64) -> f64 {
    (value * 1000.0).round() / (target * 1000.0).round()
}

/// A trigger's `metricType`: which of the HPA's calculators turns KEDA's
/// metric into replicas. `Utilization` is for CPU and memory, never an
/// external trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MetricType {
    /// `AverageValue` (KEDA's default, and what the exporter's answers
    /// mean): the metric over the target is the replica count.
    #[default]
    AverageValue,
    /// `Value`: the metric over the target is a ratio the HPA multiplies
    /// the ready pods by; KEDA's `fallback` does not apply to it.
    Value,
}

impl MetricType {
    /// Every type an external trigger may have.
    pub const ALL: [MetricType; 2] = [MetricType::AverageValue, MetricType::Value];

    /// The word a ScaledObject writes.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricType::AverageValue => "AverageValue",
            MetricType::Value => "Value",
        }
    }

    /// The type a ScaledObject's word names; `None` for another word.
    pub fn from_word(word: &str) -> Option<MetricType> {
        MetricType::ALL.into_iter().find(|t| t.as_str() == word)
    }
}

/// What a trigger asks the HPA for: its target and the calculator for it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Target {
    /// The trigger's target (`value`; 1 for WaitTime).
    pub value: f64,
    /// How the HPA compares the metric with it.
    pub metric_type: MetricType,
}

impl Target {
    /// An `AverageValue` target of `value`, as KEDA sets by default.
    pub fn average(value: f64) -> Target {
        Target {
            value,
            metric_type: MetricType::AverageValue,
        }
    }
}

/// The HPA's replica calculator for a `Value` target (an external metric:
/// `GetExternalMetricReplicas` through `getUsageRatioReplicaCount`): the
/// usage ratio is the metric over the target; within the tolerance of 1
/// the count stays, else it is the ratio times the **ready** pods (pods
/// still starting count for nothing), rounded up; from 0 replicas the
/// ratio rounded up. Values are compared as milli-quantities.
pub fn desired_replicas_of_value(
    value: f64,
    target: f64,
    current: usize,
    ready: usize,
    tolerance: f64,
) -> usize {
    let ratio = milli_ratio(value, target);
    if current == 0 {
        ratio.ceil() as usize
    } else if (1.0 - ratio).abs() <= tolerance {
        current
    } else {
        (ratio * ready as f64).ceil() as usize
    }
}

/// What KEDA does on one of its polls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KedaMove {
    /// Active at zero replicas: it scales the workload to one.
    Activate,
    /// Inactive for `cooldownPeriod` with `minReplicaCount` 0: it scales to zero.
    Deactivate,
    /// The scaler failed and `fallback` is set: it sets the workload to
    /// `fallback.replicas`, from zero too (KEDA's scale executor,
    /// `scale_scaledobjects.go`: not active, in error, fallback replicas not
    /// 0: `doFallbackScaling`).
    Fallback(usize),
}

/// KEDA's state for one ScaledObject: when it polls next and when the
/// trigger was last active.
#[derive(Debug, Clone, Default)]
pub struct Keda {
    /// When the next `IsActive` poll is due.
    next_poll: f64,
    /// The last poll that found the trigger active.
    last_active: Option<f64>,
    /// Metric requests failed in a row (KEDA's `status.health`
    /// `numberOfFailures`), for `fallback`.
    failures: u32,
}

impl Keda {
    /// KEDA's poll at `now` if one is due, given `IsActive`'s answer
    /// (`None`: the scaler failed), the replicas running and the trigger's
    /// `metricType`: the move it makes, if any. A failure moves nothing
    /// without `fallback`, nor for a `Value` trigger, to which KEDA's
    /// fallback does not apply ([`Keda::metric`]).
    pub fn poll(
        &mut self,
        cluster: &Cluster,
        now: f64,
        active: Option<bool>,
        replicas: usize,
        metric_type: MetricType,
    ) -> Option<KedaMove> {
        if now < self.next_poll {
            return None;
        }
        self.next_poll = now + cluster.keda_poll;
        match active {
            None => cluster
                .fallback
                .filter(|f| f.replicas > 0 && metric_type == MetricType::AverageValue)
                .map(|f| KedaMove::Fallback(f.replicas as usize)),
            Some(true) => {
                self.last_active = Some(now);
                (replicas == 0).then_some(KedaMove::Activate)
            }
            Some(false) => {
                let cooled = self.last_active.is_none_or(|l| now - l >= cluster.cooldown);
                (replicas > 0 && cluster.min_replicas == 0 && cooled)
                    .then_some(KedaMove::Deactivate)
            }
        }
    }

    /// The metric KEDA hands the HPA for one request: the scaler's value
    /// (`Some`), or after an error (`None`) its `fallback`'s
    /// `target × replicas` once more than `failureThreshold` requests in a
    /// row failed; `None` when the HPA gets nothing (it keeps its replicas).
    ///
    /// KEDA applies `fallback` to `AverageValue` triggers only
    /// (`isFallbackEnabled` in its `pkg/fallback`): a `Value` trigger's
    /// errors reach the HPA, which keeps its replicas.
    pub fn metric(
        &mut self,
        cluster: &Cluster,
        answer: Option<f64>,
        target: Target,
        replicas: usize,
    ) -> Option<Metric> {
        if let Some(value) = answer {
            self.failures = 0;
            return Some(Metric::Scaler(value));
        }
        self.failures = self.failures.saturating_add(1);
        let fallback = cluster.fallback?;
        (target.metric_type == MetricType::AverageValue
            && self.failures > fallback.failure_threshold)
            .then(|| Metric::Fallback(target.value * fallback.replicas_with(replicas) as f64))
    }
}

/// The metric the HPA gets at a sync.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Metric {
    /// The scaler's answer.
    Scaler(f64),
    /// KEDA's `fallback` in its place.
    Fallback(f64),
}

impl Metric {
    /// The value, whoever gave it.
    pub fn value(self) -> f64 {
        match self {
            Metric::Scaler(v) | Metric::Fallback(v) => v,
        }
    }
}

/// The HPA's state for one ScaledObject: its recent recommendations (for
/// the stabilisation windows) and its recent scale events (for the policies).
#[derive(Debug, Clone, Default)]
pub struct Hpa {
    /// (when, replicas recommended before any limit), oldest first.
    recommendations: Vec<(f64, usize)>,
    /// (when, pods added) by this HPA's scale-ups.
    ups: Vec<(f64, i64)>,
    /// (when, pods removed) by this HPA's scale-downs.
    downs: Vec<(f64, i64)>,
}

impl Hpa {
    /// One sync at `now` with `current` replicas (`ready` of them taking
    /// jobs) and the metric `value` against `target`: the replicas it sets.
    pub fn sync(
        &mut self,
        cluster: &Cluster,
        now: f64,
        (current, ready): (usize, usize),
        value: f64,
        target: Target,
    ) -> usize {
        let desired = match target.metric_type {
            MetricType::AverageValue => {
                desired_replicas(value, target.value, current, cluster.tolerance)
            }
            MetricType::Value => {
                desired_replicas_of_value(value, target.value, current, ready, cluster.tolerance)
            }
        };
        let stabilized = self.stabilize(&cluster.behavior, now, current, desired);
        let min = cluster.min_replicas.max(1);
        let new = self.limit(
            &cluster.behavior,
            now,
            current,
            stabilized,
            min,
            cluster.max_replicas,
        );
        self.record(&cluster.behavior, now, current, new);
        new
    }

    /// `stabilizeRecommendationWithBehaviors`: `desired` held to the lowest
    /// recommendation of the up window and the highest of the down window,
    /// kept as a recommendation.
    pub fn stabilize(
        &mut self,
        behavior: &Behavior,
        now: f64,
        current: usize,
        desired: usize,
    ) -> usize {
        let (up_from, down_from) = (
            now - behavior.up.stabilization,
            now - behavior.down.stabilization,
        );
        let (mut up, mut down) = (desired, desired);
        for &(t, r) in &self.recommendations {
            if t > up_from {
                up = up.min(r);
            }
            if t > down_from {
                down = down.max(r);
            }
        }
        self.recommendations
            .retain(|&(t, _)| t >= up_from || t >= down_from);
        self.recommendations.push((now, desired));
        current.max(up).min(down)
    }

    /// `convertDesiredReplicasWithBehaviorRate`: `desired` within the
    /// policies' limits and `min`..=`max`.
    pub fn limit(
        &self,
        behavior: &Behavior,
        now: f64,
        current: usize,
        desired: usize,
        min: usize,
        max: usize,
    ) -> usize {
        let cur = current as i64;
        let (want, lo, hi) = (desired as i64, min as i64, max as i64);
        let out = if want > cur {
            let limit = self.up_limit(&behavior.up, now, cur).max(cur);
            want.min(hi.min(limit))
        } else if want < cur {
            let limit = self.down_limit(&behavior.down, now, cur).min(cur);
            want.max(lo.max(limit))
        } else {
            want
        };
        out.max(0) as usize
    }

    /// The replicas at the start of `period`: `current` less this HPA's
    /// scale-ups in it, plus its scale-downs.
    fn period_start(&self, now: f64, period: f64, current: i64) -> i64 {
        let within = |events: &[(f64, i64)]| -> i64 {
            events
                .iter()
                .filter(|&&(t, _)| t > now - period)
                .map(|&(_, n)| n)
                .sum()
        };
        current - within(&self.ups) + within(&self.downs)
    }

    /// `calculateScaleUpLimitWithScalingRules`.
    fn up_limit(&self, rules: &Rules, now: f64, current: i64) -> i64 {
        let each = rules.policies.iter().map(|p| {
            let start = self.period_start(now, p.period, current);
            match p.kind {
                PolicyKind::Pods => start + i64::from(p.value),
                PolicyKind::Percent => {
                    (start as f64 * (1.0 + f64::from(p.value) / 100.0)).ceil() as i64
                }
            }
        });
        match rules.select {
            Select::Disabled => current,
            Select::Max => each.max().unwrap_or(i64::MIN),
            Select::Min => each.min().unwrap_or(i64::MAX),
        }
    }

    /// `calculateScaleDownLimitWithBehaviors`.
    fn down_limit(&self, rules: &Rules, now: f64, current: i64) -> i64 {
        let each = rules.policies.iter().map(|p| {
            let start = self.period_start(now, p.period, current);
            match p.kind {
                PolicyKind::Pods => start - i64::from(p.value),
                // Go's int32(float) truncates toward zero.
                PolicyKind::Percent => (start as f64 * (1.0 - f64::from(p.value) / 100.0)) as i64,
            }
        });
        match rules.select {
            Select::Disabled => current,
            // The most pods removed is the lowest limit.
            Select::Max => each.min().unwrap_or(i64::MAX),
            Select::Min => each.max().unwrap_or(i64::MIN),
        }
    }

    /// `storeScaleEvent`: a change this HPA made, kept as long as its
    /// direction's longest policy period needs it.
    fn record(&mut self, behavior: &Behavior, now: f64, from: usize, to: usize) {
        let keep = |rules: &Rules| rules.policies.iter().map(|p| p.period).fold(0.0, f64::max);
        let (up_keep, down_keep) = (keep(&behavior.up), keep(&behavior.down));
        self.ups.retain(|&(t, _)| t > now - up_keep);
        self.downs.retain(|&(t, _)| t > now - down_keep);
        if to > from {
            self.ups.push((now, (to - from) as i64));
        } else if to < from {
            self.downs.push((now, (from - to) as i64));
        }
    }

    /// Forgets the recommendations and events: the workload went to zero,
    /// where KEDA, not the HPA, decides.
    pub fn forget(&mut self) {
        self.recommendations.clear();
        self.ups.clear();
        self.downs.clear();
    }
}

#[cfg(test)]
mod tests {
    //! The HPA's rules against Kubernetes' own cases, each named after its
    //! test in kubernetes/kubernetes `pkg/controller/podautoscaler/`
    //! (`replica_calculator_test.go`, `horizontal_test.go`): the same
    //! inputs, the same expected replicas. Metric levels there are
    //! milli-quantities (8600 is 8.6).
    use super::*;

    /// `generateScalingRules(pods, podsPeriod, percent, percentPeriod,
    /// stabilizationWindow)` of horizontal_test.go: select Max, a policy
    /// for each non-zero value.
    fn rules(pods: u32, pods_period: f64, percent: u32, percent_period: f64, window: f64) -> Rules {
        let mut policies = Vec::new();
        if pods != 0 {
            policies.push(Policy::new(PolicyKind::Pods, pods, pods_period));
        }
        if percent != 0 {
            policies.push(Policy::new(PolicyKind::Percent, percent, percent_period));
        }
        Rules {
            stabilization: window,
            select: Select::Max,
            policies,
        }
    }

    /// `generateEventsUniformDistribution`: each change in the middle of
    /// its share of the last `period` seconds before t = 0.
    fn spread(changes: &[i64], period: f64) -> Vec<(f64, i64)> {
        let seg = period / changes.len() as f64;
        changes
            .iter()
            .enumerate()
            .map(|(i, &n)| (-(period - seg * (i as f64 + 1.0) + seg / 2.0), n))
            .collect()
    }

    /// Kubernetes' default behavior, with some direction's rules replaced.
    fn behavior(up: Option<Rules>, down: Option<Rules>) -> Behavior {
        let default = Behavior::kubernetes_default(300.0);
        Behavior {
            up: up.unwrap_or(default.up),
            down: down.unwrap_or(default.down),
        }
    }

    /// `TestScalingWithRules`' call: `convertDesiredReplicasWithBehaviorRate` at t = 0.
    fn limited(
        hpa: &Hpa,
        b: &Behavior,
        current: usize,
        desired: usize,
        min: usize,
        max: usize,
    ) -> usize {
        hpa.limit(b, 0.0, current, desired, min, max)
    }

    #[test]
    fn test_replica_calc_scale_up_per_pod_cm_external() {
        assert_eq!(desired_replicas(8.6, 2.15, 3, 0.1), 4);
    }

    #[test]
    fn test_replica_calc_scale_down_per_pod_cm_external() {
        assert_eq!(desired_replicas(8.6, 2.867, 5, 0.1), 3);
    }

    #[test]
    fn test_replica_calc_tolerance_per_pod_cm_external() {
        // 8.6 over 3 × 2.9 is 0.989: within 10 % of the target, no change.
        assert_eq!(desired_replicas(8.6, 2.9, 3, 0.1), 3);
    }

    #[test]
    fn test_replica_calc_scale_up_cm_external_ignores_unready_pods() {
        // 3 replicas, 1 ready: 8600 over 4400 is 1.95, times 1 ready pod
        // ("Would expect 6 if we didn't ignore unready pods").
        assert_eq!(desired_replicas_of_value(8.6, 4.4, 3, 1, 0.1), 2);
    }

    #[test]
    fn test_replica_calc_scale_down_cm_external() {
        // 8600 over 14334 is 0.6, times 5 ready pods.
        assert_eq!(desired_replicas_of_value(8.6, 14.334, 5, 5, 0.1), 3);
    }

    #[test]
    fn test_replica_calc_tolerance_cm_external() {
        // 8600 over 8888 is 0.968: within 10 % of 1, no change.
        assert_eq!(desired_replicas_of_value(8.6, 8.888, 3, 3, 0.1), 3);
    }

    #[test]
    fn a_value_target_from_zero_replicas_is_the_ratio_rounded_up() {
        // getUsageRatioReplicaCount with currentReplicas 0: ceil(usageRatio).
        assert_eq!(desired_replicas_of_value(2.5, 1.0, 0, 0, 0.1), 3);
    }

    #[test]
    fn a_value_target_counts_only_ready_pods_while_new_ones_start() {
        // The same metric at the same replicas asks less while pods start:
        // what makes a Value trigger slower to scale up than AverageValue.
        let cluster = Cluster::kubernetes_defaults(30.0);
        let value = Target {
            value: 10.0,
            metric_type: MetricType::Value,
        };
        // 15 over 10 is 1.5: times 4 ready pods, or times the 1 of 4 ready.
        assert_eq!(Hpa::default().sync(&cluster, 0.0, (4, 4), 15.0, value), 6);
        assert_eq!(Hpa::default().sync(&cluster, 0.0, (4, 1), 15.0, value), 2);
        // AverageValue counts no pods: 60 over 10 is 6, ready or not.
        let average = Target::average(10.0);
        assert_eq!(Hpa::default().sync(&cluster, 0.0, (4, 1), 60.0, average), 6);
        assert_eq!(Hpa::default().sync(&cluster, 0.0, (4, 4), 60.0, average), 6);
    }

    #[test]
    fn keda_falls_back_for_average_value_triggers_only() {
        let mut cluster = Cluster::kubernetes_defaults(30.0);
        cluster.fallback = Some(Fallback {
            failure_threshold: 1,
            replicas: 4,
            behavior: FallbackBehavior::Static,
        });
        let value = Target {
            value: 1.0,
            metric_type: MetricType::Value,
        };
        let (mut average_keda, mut value_keda) = (Keda::default(), Keda::default());
        for _ in 0..3 {
            average_keda.metric(&cluster, None, Target::average(1.0), 2);
            assert_eq!(value_keda.metric(&cluster, None, value, 2), None);
        }
        assert_eq!(
            average_keda.metric(&cluster, None, Target::average(1.0), 2),
            Some(Metric::Fallback(4.0))
        );
    }

    #[test]
    fn scaling_with_rules_scale_up_with_default_behavior() {
        let b = behavior(None, None);
        assert_eq!(limited(&Hpa::default(), &b, 10, 50, 1, 1000), 20);
    }

    #[test]
    fn scaling_with_rules_max_replicas_is_the_limit_because_max_replicas_lt_scale_up_limit() {
        let b = behavior(None, None);
        assert_eq!(limited(&Hpa::default(), &b, 20, 1000, 1, 10), 10);
    }

    #[test]
    fn scaling_with_rules_prenormalized_desired_replicas_lt_min_replicas() {
        let b = behavior(None, None);
        assert_eq!(limited(&Hpa::default(), &b, 3, 1, 2, 8), 2);
    }

    #[test]
    fn scaling_with_rules_scale_up_with_pods_policy_larger_than_percent_policy() {
        let b = behavior(Some(rules(100, 60.0, 100, 60.0, 0.0)), None);
        assert_eq!(limited(&Hpa::default(), &b, 10, 500, 1, 1000), 110);
    }

    #[test]
    fn scaling_with_rules_scale_up_with_percent_policy_larger_than_pods_policy() {
        let b = behavior(Some(rules(2, 60.0, 100, 60.0, 0.0)), None);
        assert_eq!(limited(&Hpa::default(), &b, 10, 500, 1, 1000), 20);
    }

    #[test]
    fn scaling_with_rules_scale_up_with_pod_policy_limitation() {
        let b = behavior(Some(rules(30, 60.0, 0, 0.0, 0.0)), None);
        assert_eq!(limited(&Hpa::default(), &b, 10, 50, 1, 1000), 40);
    }

    #[test]
    fn scaling_with_rules_scale_up_with_percent_policy_limitation() {
        let b = behavior(Some(rules(0, 0.0, 200, 60.0, 0.0)), None);
        assert_eq!(limited(&Hpa::default(), &b, 10, 50, 1, 1000), 30);
    }

    #[test]
    fn scaling_with_rules_scale_down_with_percent_policy_larger_than_pod_policy() {
        let b = behavior(None, Some(rules(20, 60.0, 1, 60.0, 300.0)));
        assert_eq!(limited(&Hpa::default(), &b, 100, 2, 1, 1000), 80);
    }

    #[test]
    fn scaling_with_rules_scale_down_with_pod_policy_limitation() {
        let b = behavior(None, Some(rules(5, 60.0, 0, 0.0, 300.0)));
        assert_eq!(limited(&Hpa::default(), &b, 10, 2, 1, 1000), 5);
    }

    #[test]
    fn scaling_with_rules_scale_down_with_spec_min_replicas_limitation_with_large_percent_policy() {
        let b = behavior(None, Some(rules(0, 0.0, 100, 60.0, 300.0)));
        assert_eq!(limited(&Hpa::default(), &b, 10, 2, 5, 1000), 5);
    }

    #[test]
    fn scaling_with_rules_scale_up_with_pod_policy_and_previous_scale_up_events() {
        let hpa = Hpa {
            ups: spread(&[1, 5, 9], 120.0),
            ..Hpa::default()
        };
        let b = behavior(Some(rules(150, 120.0, 0, 0.0, 0.0)), None);
        // 100 - 15 + 150
        assert_eq!(limited(&hpa, &b, 100, 500, 1, 1000), 235);
    }

    #[test]
    fn scaling_with_rules_scale_up_with_percent_policy_and_previous_scale_up_events() {
        let hpa = Hpa {
            ups: spread(&[1, 5, 9], 120.0),
            ..Hpa::default()
        };
        let b = behavior(Some(rules(0, 0.0, 200, 120.0, 0.0)), None);
        // (100 - 15) + 200 %
        assert_eq!(limited(&hpa, &b, 100, 500, 1, 1000), 255);
    }

    #[test]
    fn scaling_with_rules_scale_up_with_current_replicas_limitation_with_a_lot_of_recent_scale_up_events()
     {
        let hpa = Hpa {
            ups: spread(&[1, 5, 9], 120.0),
            ..Hpa::default()
        };
        let b = behavior(Some(rules(5, 120.0, 0, 0.0, 0.0)), None);
        // 85 + 5 is under the 100 running: no scale-up, and none down.
        assert_eq!(limited(&hpa, &b, 100, 500, 1, 1000), 100);
    }

    #[test]
    fn scaling_with_rules_scale_down_with_percent_policy_limitation_and_previous_events() {
        let hpa = Hpa {
            downs: spread(&[2, 4, 6], 120.0),
            ..Hpa::default()
        };
        let b = behavior(None, Some(rules(0, 0.0, 50, 120.0, 300.0)));
        // (100 + 12) - 50 %
        assert_eq!(limited(&hpa, &b, 100, 0, 1, 1000), 56);
    }

    #[test]
    fn scaling_with_rules_scale_down_with_previous_events_preventing_further_scale_down() {
        let hpa = Hpa {
            downs: spread(&[10, 10, 10], 120.0),
            ..Hpa::default()
        };
        let b = behavior(None, Some(rules(0, 0.0, 10, 120.0, 300.0)));
        // (100 + 30) - 10 % = 117, above the 100 running: keep 100.
        assert_eq!(limited(&hpa, &b, 100, 0, 1, 1000), 100);
    }

    /// `TestNormalizeDesiredReplicasWithBehavior`'s call:
    /// `stabilizeRecommendationWithBehaviors` at t = 0 with the given
    /// (replicas, seconds ago) recommendations and windows.
    fn stabilized(
        recs: &[(usize, f64)],
        current: usize,
        desired: usize,
        up: f64,
        down: f64,
    ) -> usize {
        let mut hpa = Hpa {
            recommendations: recs.iter().map(|&(r, ago)| (-ago, r)).collect(),
            ..Hpa::default()
        };
        let mut b = behavior(None, None);
        b.up.stabilization = up;
        b.down.stabilization = down;
        hpa.stabilize(&b, 0.0, current, desired)
    }

    #[test]
    fn normalize_with_behavior_simple_scale_down_stabilization() {
        assert_eq!(stabilized(&[(4, 120.0), (5, 60.0)], 100, 3, 0.0, 180.0), 5);
    }

    #[test]
    fn normalize_with_behavior_simple_scale_up_stabilization() {
        assert_eq!(stabilized(&[(4, 120.0), (5, 60.0)], 1, 7, 300.0, 0.0), 4);
    }

    #[test]
    fn normalize_with_behavior_no_scale_down_stabilization() {
        assert_eq!(stabilized(&[(1, 120.0), (2, 60.0)], 100, 3, 300.0, 0.0), 3);
    }

    #[test]
    fn normalize_with_behavior_no_scale_up_stabilization() {
        assert_eq!(stabilized(&[(4, 120.0), (5, 60.0)], 1, 3, 0.0, 300.0), 3);
    }

    #[test]
    fn normalize_with_behavior_scale_down_stabilization_reuse_one_of_obsolete_recommendation_element()
     {
        let recs = [(10, 600.0), (4, 60.0), (5, 120.0), (9, 540.0)];
        assert_eq!(stabilized(&recs, 100, 3, 0.0, 180.0), 5);
    }

    #[test]
    fn normalize_with_behavior_scale_up_stabilization_reuse_one_of_obsolete_recommendation_element()
    {
        let recs = [(10, 6000.0), (6, 60.0), (5, 120.0), (9, 180.0)];
        assert_eq!(stabilized(&recs, 1, 100, 300.0, 0.0), 5);
    }

    #[test]
    fn normalize_desired_replicas_stabilize_old_recommendations() {
        // TestNormalizeDesiredReplicas, "stabilize - old recommendations":
        // the default 5-minute scale-down window.
        let recs = [(10, 600.0), (4, 60.0), (5, 120.0), (9, 540.0)];
        assert_eq!(stabilized(&recs, 100, 3, 0.0, 300.0), 5);
    }

    #[test]
    fn a_sync_holds_a_scale_down_for_the_window_then_follows_the_metric() {
        // The rules together, as a replay calls them: 10 pods at 10 jobs
        // each, then the metric drops to 2 pods' worth.
        let cluster = Cluster::kubernetes_defaults(30.0);
        let mut hpa = Hpa::default();
        assert_eq!(
            hpa.sync(&cluster, 0.0, (10, 10), 100.0, Target::average(10.0)),
            10
        );
        assert_eq!(
            hpa.sync(&cluster, 15.0, (10, 10), 20.0, Target::average(10.0)),
            10
        );
        assert_eq!(
            hpa.sync(&cluster, 285.0, (10, 10), 20.0, Target::average(10.0)),
            10
        );
        assert_eq!(
            hpa.sync(&cluster, 300.0, (10, 10), 20.0, Target::average(10.0)),
            2
        );
    }

    #[test]
    fn keda_wakes_from_zero_and_scales_to_zero_only_after_the_cooldown() {
        let cluster = Cluster::kubernetes_defaults(30.0);
        let mut keda = Keda::default();
        let avg = MetricType::AverageValue;
        assert_eq!(
            keda.poll(&cluster, 0.0, Some(true), 0, avg),
            Some(KedaMove::Activate)
        );
        // Not due before pollingInterval.
        assert_eq!(keda.poll(&cluster, 15.0, Some(false), 1, avg), None);
        assert_eq!(keda.poll(&cluster, 30.0, Some(false), 1, avg), None);
        assert_eq!(
            keda.poll(&cluster, 300.0, Some(false), 1, avg),
            Some(KedaMove::Deactivate)
        );
    }

    // kedacore/keda `pkg/scaling/executor/scale_scaledobjects.go`,
    // `RequestScale`: not active, in error, `fallback.replicas` not 0 →
    // `doFallbackScaling`, whatever the replicas (from zero too).
    #[test]
    fn a_failing_scaler_has_keda_set_the_fallback_replicas_at_its_poll_from_zero_too() {
        let mut cluster = Cluster::kubernetes_defaults(30.0);
        let avg = MetricType::AverageValue;
        let mut keda = Keda::default();
        // Without fallback a failure moves nothing.
        assert_eq!(keda.poll(&cluster, 0.0, None, 0, avg), None);
        cluster.fallback = Some(Fallback {
            failure_threshold: 3,
            replicas: 4,
            behavior: FallbackBehavior::Static,
        });
        let mut keda = Keda::default();
        assert_eq!(
            keda.poll(&cluster, 0.0, None, 0, avg),
            Some(KedaMove::Fallback(4))
        );
        assert_eq!(keda.poll(&cluster, 15.0, None, 4, avg), None);
        assert_eq!(
            keda.poll(&cluster, 30.0, None, 9, avg),
            Some(KedaMove::Fallback(4))
        );
        // KEDA's fallback is for AverageValue triggers only.
        let mut keda = Keda::default();
        assert_eq!(keda.poll(&cluster, 0.0, None, 0, MetricType::Value), None);
    }

    // KEDA's fallback, against kedacore/keda `pkg/fallback/fallback_test.go`:
    // failureThreshold 3, replicas 10, a target of 10 per replica.

    fn with_fallback(behavior: FallbackBehavior) -> Cluster {
        Cluster {
            fallback: Some(Fallback {
                failure_threshold: 3,
                replicas: 10,
                behavior,
            }),
            ..Cluster::kubernetes_defaults(30.0)
        }
    }

    /// Fails `n` requests in a row, as KEDA's health status counts them.
    fn failed(keda: &mut Keda, cluster: &Cluster, n: u32, replicas: usize) -> Option<Metric> {
        let mut last = None;
        for _ in 0..n {
            last = keda.metric(cluster, None, Target::average(10.0), replicas);
        }
        last
    }

    #[test]
    fn should_propagate_the_error_when_fallback_is_disabled() {
        let cluster = Cluster::kubernetes_defaults(30.0);
        assert_eq!(failed(&mut Keda::default(), &cluster, 10, 5), None);
    }

    #[test]
    fn should_bump_the_number_of_failures_when_metrics_call_fails() {
        let cluster = with_fallback(FallbackBehavior::Static);
        let mut keda = Keda::default();
        assert_eq!(failed(&mut keda, &cluster, 3, 5), None);
        assert_eq!(keda.failures, 3);
    }

    #[test]
    fn should_return_a_normalised_metric_when_number_of_failures_are_beyond_threshold() {
        let cluster = with_fallback(FallbackBehavior::Static);
        assert_eq!(
            failed(&mut Keda::default(), &cluster, 4, 5),
            Some(Metric::Fallback(100.0))
        );
    }

    #[test]
    fn should_reset_the_health_status_when_scaler_metrics_are_available() {
        let cluster = with_fallback(FallbackBehavior::Static);
        let mut keda = Keda::default();
        failed(&mut keda, &cluster, 3, 5);
        assert_eq!(
            keda.metric(&cluster, Some(7.0), Target::average(10.0), 5),
            Some(Metric::Scaler(7.0))
        );
        assert_eq!(keda.failures, 0);
        // Three failures again are within the threshold once more.
        assert_eq!(failed(&mut keda, &cluster, 3, 5), None);
    }

    #[test]
    fn should_use_fallback_replicas_when_current_replicas_is_lower_when_behavior_is_current_replicas_if_higher()
     {
        let cluster = with_fallback(FallbackBehavior::CurrentReplicasIfHigher);
        assert_eq!(
            failed(&mut Keda::default(), &cluster, 4, 4),
            Some(Metric::Fallback(100.0))
        );
        assert_eq!(
            failed(&mut Keda::default(), &cluster, 4, 12),
            Some(Metric::Fallback(120.0))
        );
    }

    #[test]
    fn should_use_current_replicas_when_behavior_is_current_replicas() {
        let cluster = with_fallback(FallbackBehavior::CurrentReplicas);
        assert_eq!(
            failed(&mut Keda::default(), &cluster, 4, 6),
            Some(Metric::Fallback(60.0))
        );
    }

    #[test]
    fn should_ignore_current_replicas_when_behavior_is_static() {
        let cluster = with_fallback(FallbackBehavior::Static);
        assert_eq!(
            failed(&mut Keda::default(), &cluster, 4, 15),
            Some(Metric::Fallback(100.0))
        );
    }

    #[test]
    fn current_replicas_if_lower_keeps_the_lower_of_the_two() {
        let cluster = with_fallback(FallbackBehavior::CurrentReplicasIfLower);
        assert_eq!(
            failed(&mut Keda::default(), &cluster, 4, 4),
            Some(Metric::Fallback(40.0))
        );
        assert_eq!(
            failed(&mut Keda::default(), &cluster, 4, 15),
            Some(Metric::Fallback(100.0))
        );
    }
}
