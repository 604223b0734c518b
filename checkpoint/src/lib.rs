//! Checkpoints: merging the copies of a forked (HadarE) job.
