//! The simulator: the round executor whose rounds take no time
//! ([`SimRounds`]: tasks progress at the table's rates, restarts and
//! sharing charged as the runtime meets them). [`crate::experiment`]
//! drives it; [`crate::sweep`] runs many experiments.

mod rounds;

pub use rounds::SimRounds;

/// Runs a future to its end on this thread. The simulator's futures never
/// wait on anything (its rounds take no time), so polling them in a loop is
/// all an executor has to do; a future that does wait is polled again after
/// a yield until it is ready.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::yield_now();
    }
}
