//! `trainer`: the model and everything that learns.
