"""hf_neuron: make unchanged Hugging Face code run well on AWS Trainium (device "neuron").

Importing this package is cheap; the simulator and the library adapters are activated through
torch's device-backend autoload entry point (see ``hf_neuron._autoload``).
"""

__version__ = "0.1.0"
