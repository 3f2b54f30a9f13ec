mod cases;
mod client;
mod differential;
mod examples;
mod fixtures;
mod properties;
