mod cases;
mod client;
mod differential;
mod properties;
