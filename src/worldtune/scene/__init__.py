"""The synthetic tabletop scene: a ray caster (`raycast`), its episodes (`episode`), and their writing as a
LeRobot dataset (`writer`). Data preparation, evaluation, serving, the tests and the benchmarks all draw on it."""
