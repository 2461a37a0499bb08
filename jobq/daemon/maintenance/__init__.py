"""The maintenance process (:mod:`.duties`): recovering lost workers' jobs
(:mod:`.reaper`) and, under the leader lock, the cluster-wide duties, among them firing
periodic jobs (:mod:`.firing`) when the schedule clock says (:mod:`.schedule_clock`)."""
