"""Hosts, how commands reach them (local or OpenSSH), and the processes glmserve starts there."""
