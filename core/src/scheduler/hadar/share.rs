//! Space sharing: a job left waiting may share a running gang's GPUs.

use std::collections::HashMap;

use crate::job::JobId;
use crate::plan::Task;
use crate::workload::Workload;

/// Space sharing: jobs in `order` that got no task this round join a
/// running gang on its GPUs where the pair gains more than `min_gain` (see
/// [`HadarSettings::share_min_gain`](super::HadarSettings::share_min_gain)); each
/// gang hosts at most one job.
pub(super) fn share(w: &Workload, tasks: &mut Vec<Task>, order: &[JobId], min_gain: f64) {
    use crate::cluster::GpuTypeId;
    let cluster = w.cluster();
    let running: std::collections::HashSet<JobId> = tasks.iter().map(|t| t.job).collect();
    // Hosts (whole gangs on one GPU type) by class and type: a guest's gain
    // depends on nothing else, so each guest weighs classes, not gangs.
    let mut by_class: HashMap<(u32, GpuTypeId), Vec<usize>> = HashMap::new();
    for (i, t) in tasks.iter().enumerate() {
        let Some(&first) = t.gpus.first() else {
            continue;
        };
        let ty = cluster.gpu(first).gpu_type;
        let whole = t.copy == 0
            && t.gpus.len() == w.jobs()[t.job.index()].scale_factor as usize
            && t.gpus.iter().all(|&g| cluster.gpu(g).gpu_type == ty);
        if whole {
            by_class
                .entry((w.share_class(t.job.index()), ty))
                .or_default()
                .push(i);
        }
    }
    // Deterministic: classes in order, each class's gangs first placed first.
    let mut hosts: Vec<(GpuTypeId, std::collections::VecDeque<usize>)> = {
        let mut v: Vec<_> = by_class.into_iter().collect();
        v.sort_by_key(|(key, _)| *key);
        v.into_iter().map(|((_, ty), g)| (ty, g.into())).collect()
    };
    for &j in order {
        if hosts.is_empty() {
            break;
        }
        if running.contains(&j) {
            continue;
        }
        let job = &w.jobs()[j.index()];
        let best = w.rates_of(j.index()).iter().copied().fold(0.0, f64::max);
        let mut chosen: Option<(usize, f64)> = None;
        for (slot, (ty, gangs)) in hosts.iter().enumerate() {
            let host = tasks[gangs[0]].job;
            if w.jobs()[host.index()].scale_factor != job.scale_factor {
                continue;
            }
            let Some([rh, rj]) = w.colocated(host.index(), j.index(), *ty) else {
                continue;
            };
            let alone = w.rate(host.index(), *ty);
            let gain = rj / best - (1.0 - rh / alone.max(1e-12));
            if gain > min_gain && chosen.is_none_or(|(_, g)| gain > g) {
                chosen = Some((slot, gain));
            }
        }
        let Some((slot, _)) = chosen else { continue };
        let gangs = &mut hosts[slot].1;
        let Some(i) = gangs.pop_front() else { continue };
        if gangs.is_empty() {
            hosts.remove(slot);
        }
        tasks.push(Task {
            job: j,
            copy: 0,
            gpus: tasks[i].gpus.clone(),
        });
    }
}
