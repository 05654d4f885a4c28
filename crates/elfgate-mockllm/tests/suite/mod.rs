//! One module per area of the suite.

mod gemini;
mod responses;
mod wire;
