//! What the evidence allows a report to claim.
