//! Profile summaries: per trace and per controlled sweep.
