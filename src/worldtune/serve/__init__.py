"""`worldtune serve`: a Cosmos 3 forward-dynamics world model as a policy-evaluation server.

`server.py` serves a `WorldModel` (world.py) over HTTP + JSON (protocol.py); `Client` (client.py) and
`WorldModelEnv` (env.py, gymnasium-style) are the policy's side; `recorder.py` writes every rollout as a
LeRobot v3.0 episode; `cameras.py` maps a robot's cameras onto the model's frames. See docs/serve.md.
"""

from worldtune.serve.client import Client
from worldtune.serve.env import WorldModelEnv

__all__ = ["Client", "WorldModelEnv"]
