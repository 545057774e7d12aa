"""What operators see: the admin HTTP port (commands, /metrics, the web console, its browser checks), the
four-letter words and the statistics snapshot they all read."""
