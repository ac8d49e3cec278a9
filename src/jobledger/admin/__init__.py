"""The admin commands: on jobs (`jobs`) and on schedules (`schedules`), each read, decided
by the domain and applied under the stream's compare-and-set."""
