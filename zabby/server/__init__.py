"""The trio shell: sockets, timers, threads and processes live here and nowhere else."""
