fn main() {
    let rows = hadar_core::reproduce::check(0.05, &mut |c| {
        println!(
            "{} {:<28} ours {:>7.2}h {:>6.2}h {:.3} | gavel {:>7.2}h {:>6.2}h {:.3} | ratio {:.3} {:.3} {}",
            c.gavel.run, c.gavel.policy, c.makespan_s / 3600.0, c.avg_jct_s / 3600.0, c.utilization,
            c.gavel.makespan_s / 3600.0, c.gavel.avg_jct_s / 3600.0, c.gavel.utilization,
            c.makespan_ratio, c.jct_ratio, if c.within { "ok" } else if c.checked { "FAIL" } else { "-" }
        )
    });
    if let Err(e) = rows { eprintln!("{e}"); }
}
