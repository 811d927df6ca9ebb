//! publish: the fleet repo (commit, push, races, locking) and review mode (branches and
//! pull requests on emulated forges).

mod attributes;
mod repo;
mod review;
mod stream;
mod tick_git;
