"""Loading models and processors onto Neuron devices.

- :mod:`.placement`: ``device_map="neuron"`` / ``"auto"`` place every weight on a neuron device.
- :mod:`.synchronous`: weights load synchronously onto the device.
- :mod:`.processors`: processors with a video processor build without torchvision.
- :mod:`.hub_kernels`: models load and train compiled with Hugging Face's ``kernels`` package installed.
"""
