//! `prof.tar.gz`: the outputs and captured symbols packed with relative paths, and its safe extraction.
