//! decide: the recorded annotations, however damaged, lead to a decision with a reason.

mod annotations;
