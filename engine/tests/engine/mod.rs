mod cases;
mod client;
mod differential;
mod fixtures;
mod properties;
