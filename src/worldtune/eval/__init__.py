"""Evaluation of generated videos: Sampson geometry (`sampson`), a VLM judge (`judge`), the
`worldtune evaluate` stage (`evaluate`) and the HTML/Markdown report (`report`)."""
