//! Prices of GPU-time per type and future round, rising with what is
//! already committed: `p = L_w * (U/L)^(g/c)` (the exponential price of
//! online primal-dual schedulers), `g` the committed GPUs, `c` the capacity.

/// Committed GPUs and prices over the planning horizon.
#[derive(Debug, Clone)]
pub struct PriceGrid {
    /// Types.
    k: usize,
    /// Rounds planned ahead.
    horizon: usize,
    /// GPUs of each type.
    capacity: Vec<u32>,
    /// `used[t * k + w]`: GPUs of type `w` committed in future round `t`.
    used: Vec<u32>,
    /// Price of an idle GPU-second of each type (`L_w`).
    base: Vec<f64>,
    /// `U / L`: how much a full type costs over an idle one.
    ratio: f64,
    /// `prices[t * k + w]`: [`Self::price`], kept current on every commit
    /// (planning asks for prices far more often than it commits, and the
    /// power was a third of a decision's time at 2,048 jobs).
    prices: Vec<f64>,
    /// [`Self::price_step`] per type.
    steps: Vec<f64>,
}

impl PriceGrid {
    /// An empty grid.
    pub fn new(capacity: Vec<u32>, horizon: usize, base: Vec<f64>, ratio: f64) -> Self {
        let k = capacity.len();
        let idle: Vec<f64> = (0..k)
            .map(|w| price_at(capacity[w], 0, base[w], ratio))
            .collect();
        let steps = capacity
            .iter()
            .map(|&c| ratio.powf(1.0 / f64::from(c.max(1))))
            .collect();
        Self {
            k,
            horizon,
            used: vec![0; horizon * k],
            prices: idle.repeat(horizon),
            steps,
            capacity,
            base,
            ratio,
        }
    }

    /// Rounds planned ahead.
    pub fn horizon(&self) -> usize {
        self.horizon
    }

    /// Free GPUs of type `w` in round `t`.
    pub fn free(&self, t: usize, w: usize) -> u32 {
        self.capacity[w] - self.used[t * self.k + w]
    }

    /// Price of one more GPU-second of type `w` in round `t`.
    pub fn price(&self, t: usize, w: usize) -> f64 {
        self.prices[t * self.k + w]
    }

    /// Price of an idle GPU of type `w`.
    pub fn base(&self, w: usize) -> f64 {
        self.base[w]
    }

    /// The factor by which one more committed GPU of type `w` raises its price.
    pub fn price_step(&self, w: usize) -> f64 {
        self.steps[w]
    }

    /// Commits `n` GPUs of type `w` in round `t`.
    pub fn commit(&mut self, t: usize, w: usize, n: u32) {
        let i = t * self.k + w;
        self.used[i] += n;
        debug_assert!(self.used[i] <= self.capacity[w]);
        self.prices[i] = price_at(self.capacity[w], self.used[i], self.base[w], self.ratio);
    }
}

/// `L * (U/L)^(used/capacity)`; infinite for a type with no GPUs.
fn price_at(capacity: u32, used: u32, base: f64, ratio: f64) -> f64 {
    if capacity == 0 {
        return f64::INFINITY;
    }
    base * ratio.powf(f64::from(used) / f64::from(capacity))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_rise_exponentially_with_commitment() {
        // 4 GPUs, idle price 1, full price 16: each GPU committed doubles it.
        let mut g = PriceGrid::new(vec![4], 2, vec![1.0], 16.0);
        assert_eq!(g.price(0, 0), 1.0);
        g.commit(0, 0, 1);
        assert!((g.price(0, 0) - 2.0).abs() < 1e-12);
        g.commit(0, 0, 3);
        assert!((g.price(0, 0) - 16.0).abs() < 1e-12);
        assert_eq!(g.free(0, 0), 0);
        // Other rounds are untouched.
        assert_eq!(g.price(1, 0), 1.0);
        assert_eq!(g.free(1, 0), 4);
    }
}
