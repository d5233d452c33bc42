//! The cluster's rules: what KEDA and the Horizontal Pod Autoscaler do with
//! the scaler's answers. KEDA polls `IsActive` every `pollingInterval`,
//! wakes a ScaledObject from zero and puts it back to zero after
//! `cooldownPeriod` inactive; the HPA, every sync, turns the metric into a
//! replica count with the AverageValue calculator (within a tolerance it
//! keeps the count), limits how fast it scales up and holds a scale-down
//! for the stabilisation window.

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
    /// The HPA's scale-down stabilisation window: it takes the highest
    /// recommendation of this long ago (300 s).
    pub down_window: f64,
    /// From the decision to create a pod to the pod taking jobs.
    pub pod_start: f64,
    /// `minReplicaCount`: 0 lets KEDA scale to zero.
    pub min_replicas: usize,
    /// `maxReplicaCount`: the HPA sets at most this many.
    pub max_replicas: usize,
    /// The HPA's tolerance: within this ratio of the target it keeps the
    /// replica count (0.1).
    pub tolerance: f64,
}

impl Cluster {
    /// KEDA's and Kubernetes' defaults, with `pod_start` as given.
    pub fn kubernetes_defaults(pod_start: f64) -> Cluster {
        Cluster {
            hpa_sync: 15.0,
            keda_poll: 30.0,
            cooldown: 300.0,
            down_window: 300.0,
            pod_start,
            min_replicas: 0,
            // KEDA's default maxReplicaCount.
            max_replicas: 100,
            tolerance: 0.1,
        }
    }
}

/// The HPA's replica calculator for an AverageValue target (an external
/// metric, as KEDA's): the metric over the target per replica; within the
/// tolerance of 1 the count stays, else it is the metric over the target,
/// rounded up. Values are compared as Kubernetes' milli-quantities.
pub fn desired_replicas(value: f64, target: f64, current: usize, tolerance: f64) -> usize {
    if (1.0 - value / (target * current as f64)).abs() > tolerance {
        ((value * 1000.0).round() / (target * 1000.0).round()).ceil() as usize
    } else {
        current
    }
}

/// The most replicas one sync may scale `current` up to, by the HPA's
/// default scale-up policies (100 % or 4 pods per 15 s, whichever is more).
pub fn scale_up_limit(current: usize) -> usize {
    (2 * current).max(current + 4)
}

/// What KEDA does on one of its polls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KedaMove {
    /// Active at zero replicas: it scales the workload to one.
    Activate,
    /// Inactive for `cooldownPeriod` with `minReplicaCount` 0: it scales to zero.
    Deactivate,
}

/// KEDA's state for one ScaledObject: when it polls next and when the
/// trigger was last active.
#[derive(Debug, Clone, Default)]
pub struct Keda {
    /// When the next `IsActive` poll is due.
    next_poll: f64,
    /// The last poll that found the trigger active.
    last_active: Option<f64>,
}

impl Keda {
    /// KEDA's poll at `now` if one is due, given `IsActive`'s answer and
    /// the replicas running: the move it makes, if any.
    pub fn poll(
        &mut self,
        cluster: &Cluster,
        now: f64,
        active: bool,
        replicas: usize,
    ) -> Option<KedaMove> {
        if now < self.next_poll {
            return None;
        }
        self.next_poll = now + cluster.keda_poll;
        if active {
            self.last_active = Some(now);
            (replicas == 0).then_some(KedaMove::Activate)
        } else {
            let cooled = self.last_active.is_none_or(|l| now - l >= cluster.cooldown);
            (replicas > 0 && cluster.min_replicas == 0 && cooled).then_some(KedaMove::Deactivate)
        }
    }
}

/// The HPA's state for one ScaledObject: its recent recommendations, for
/// the scale-down stabilisation window.
#[derive(Debug, Clone, Default)]
pub struct Hpa {
    /// (when, replicas recommended), oldest first.
    recommendations: Vec<(f64, usize)>,
}

impl Hpa {
    /// One sync at `now` with `current` replicas and the metric `value`
    /// against `target`: the replicas it sets.
    pub fn sync(
        &mut self,
        cluster: &Cluster,
        now: f64,
        current: usize,
        value: f64,
        target: f64,
    ) -> usize {
        // max then min, not `clamp`, which panics when min > max: the
        // maximum wins, as the HPA's own bounds do.
        let desired = desired_replicas(value, target, current, cluster.tolerance)
            .max(cluster.min_replicas.max(1))
            .min(cluster.max_replicas);
        self.recommendations
            .retain(|&(t, _)| now - t < cluster.down_window);
        self.recommendations.push((now, desired));
        if desired > current {
            desired.min(scale_up_limit(current))
        } else {
            let held = self.recommendations.iter().map(|&(_, d)| d).max();
            current.min(held.unwrap_or(desired))
        }
    }

    /// Forgets the recommendations: the workload went to zero, where KEDA,
    /// not the HPA, decides.
    pub fn forget(&mut self) {
        self.recommendations.clear();
    }
}
