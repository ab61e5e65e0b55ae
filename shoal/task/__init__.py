"""What a task is on every side (client, head, agent, worker): its codec (a call or a
command becomes bytes and back), its errors, its future, waiting on futures, and the
context that says where the code runs. Nothing here imports the client, agent or head."""
