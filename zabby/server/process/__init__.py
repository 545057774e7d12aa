"""What the server process needs of the operating system: the disk thread and the kernel's fsync, descriptors,
forked children, the garbage collector, listeners, logging, and containment of what goes wrong."""
