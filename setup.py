from setuptools import find_packages, setup

setup(name='mmpoly', version='0.1.0', packages=find_packages(include=['mmpoly', 'mmpoly.*']))
