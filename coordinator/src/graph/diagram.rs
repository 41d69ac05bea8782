//! Drawing a graph as text (to be written).
